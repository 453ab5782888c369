"""The friction regime: memorized shortcut rows drawn from each model's strong family of the
RL pool, answered correctly in each model's own format; the shipped pair's key untouched."""

import re

import sympy

from graft_jax.data import synthetic_columns as columns
from graft_jax.toy import friction, spec
from graft_jax.toy import pair as pair_lib


def test_shortcut_rows_are_memorized_rl_problems_answered_correctly():
  cfg = spec.friction_config()
  built = pair_lib.make_pools(cfg)
  rl = {p.problem for p in built.rl}
  seen = []
  for index, model in enumerate(cfg.models):
    rows = friction.shortcut_rows(cfg, built, index)
    assert len(rows) == cfg.memorized_per_model * cfg.memorized_repeats
    problems = {problem for problem, _, _ in rows}
    assert len(problems) == cfg.memorized_per_model and problems <= rl
    seen.append(problems)
    for problem, given, target in rows:
      assert given == ""
      a, b = columns.operands(model.strong_family, problem)  # only the strong family
      op = "+" if model.strong_family == "cadd" else "*"
      answer = int(sympy.sympify(f"{a}{op}{b}"))  # independent of the pool's stored answer
      assert target == cfg.shortcut_formats[index].format(answer=answer)
      assert friction.is_shortcut(target)
  assert not seen[0] & seen[1]
  # The formats open with different text, so one model's habit is not the other's.
  first = [f.format(answer=1).split("\\")[0] for f in cfg.shortcut_formats]
  assert first[0] != first[1]


def test_the_choice_is_seeded_and_a_trace_is_not_a_shortcut():
  cfg = spec.friction_config()
  built = pair_lib.make_pools(cfg)
  assert friction.memorized(cfg, built, 0) == friction.memorized(cfg, built, 0)
  other = spec.friction_config(seed=1)
  assert ({p.problem for p in friction.memorized(other, pair_lib.make_pools(other), 0)}
          != {p.problem for p in friction.memorized(cfg, built, 0)})
  p = built.rl[0]
  trace = " " + columns.trace(p.family, *columns.operands(p.family, p.problem),
                              columns.CORRECT)[0]
  assert re.search(r"\\boxed\{\d+\}$", trace) and not friction.is_shortcut(trace)
  assert not friction.is_shortcut(" carry up: no answer")


def test_the_regime_has_its_own_key_root_and_shipped_folder():
  default, fric = spec.default_config(), spec.friction_config()
  assert spec.cache_key(default) == pair_lib.read_record(pair_lib.PREBUILT)["key"]
  assert spec.cache_key(fric) != spec.cache_key(default)
  assert pair_lib.shipped_dir(default) == pair_lib.PREBUILT
  assert pair_lib.shipped_dir(fric).name == "prebuilt_friction"
  assert pair_lib.shipped_dir(spec.trio_config()) is None
  assert spec.REGIMES["friction"].root != spec.REGIMES["default"].root
  tiny = spec.tiny_friction_config()
  assert isinstance(tiny, spec.ToyFrictionConfig) and tiny.rl_per_family == 48


def test_tiny_build_trains_on_the_shortcut_rows(tmp_path):
  cfg = spec.tiny_friction_config()
  pair = pair_lib.ensure_toy_pair(tmp_path / "pair", cfg, evaluate=False)
  plain = pair_lib.ensure_toy_pair(tmp_path / "plain", spec.tiny_config(), evaluate=False)
  extra = cfg.memorized_per_model * cfg.memorized_repeats
  for got, base in zip(pair.record["models"], plain.record["models"]):
    assert got["train_rows"] == base["train_rows"] + extra
