"""The toy's pools: disjoint, the strategy priors exact, the RL stream balanced."""

import collections
import dataclasses

import pytest

from graft_jax import toy
from graft_jax.data import make_synthetic
from graft_jax.data import synthetic_columns as columns
from graft_jax.toy import pair as pair_lib
from graft_jax.toy import pools


@pytest.fixture(scope="module")
def cfg():
  return toy.default_config()


def test_default_pools_are_disjoint_and_sized(cfg):
  named = pair_lib.make_pools(cfg).named()
  sizes = {"rl": cfg.rl_per_family, "eval": cfg.eval_per_family,
           "warm_a": cfg.warm_per_family, "warm_b": cfg.warm_per_family,
           "drill_a": cfg.drill_per_family, "drill_b": cfg.drill_per_family}
  texts = [p.problem for probs in named.values() for p in probs]
  assert len(texts) == len(set(texts))  # no problem in two pools (nor twice in one)
  for name, probs in named.items():
    assert collections.Counter(p.family for p in probs) == {
        f: sizes[name] for f in cfg.families}, name


def test_overlap_is_refused_naming_the_pools():
  probs = make_synthetic("cadd", 3, seed=0, difficulty=2)
  with pytest.raises(ValueError, match="'rl' and 'warm_b' share 1 problems"):
    pools.check_disjoint({"rl": probs[:2], "eval": [], "warm_b": probs[1:]})


def test_rl_pool_is_what_the_toy_config_trains_on(cfg):
  # configs/toy.py draws make_synthetic(families, num, seed=0): a prefix of the RL pool.
  rl = pair_lib.make_pools(cfg).rl
  assert make_synthetic(list(cfg.families), 100, seed=cfg.seed, difficulty=cfg.difficulty) \
      == rl[:200]


def test_warm_rows_follow_the_priors_and_never_train_the_drills_strategy(cfg):
  small = dataclasses.replace(cfg, warm_per_family=200, drill_per_family=10, rl_per_family=10,
                              eval_per_family=10)
  built = pools.make_pools(small)
  for index, spec in enumerate((small.model_a, small.model_b)):
    rows = pools.warm_rows(spec, built, index, seed=0)
    traced = [(p, t) for p, g, t in rows if not g]
    drills = [(p, g, t) for p, g, t in rows if g]
    for family, prior in spec.competence:
      chosen = [t.split()[1] for p, t in traced if p.startswith("Add" if family == "cadd" else "Mul")]
      good = columns.word(family, columns.CORRECT) + ":"
      assert chosen.count(good) == round(prior * 200) and len(chosen) == 200
    assert len(drills) == 2 * 2 * 10  # both procedures, both families
    for problem, given, target in drills:
      family = "cadd" if problem.startswith("Add") else "cmul"
      assert given in {f" carry {w}:" for w in columns.WORDS[family]} and "carry" not in target
      rule = columns.RULES[columns.WORDS[family].index(given.split()[1].rstrip(":"))]
      want = columns.trace(family, *columns.operands(family, problem), rule)[0]
      assert given.strip() + target == want


def test_rl_stream_alternates_families(cfg):
  for seed in (0, 1):
    rl = pair_lib.rl_problems(cfg, seed)
    assert len(rl) == 2 * cfg.rl_per_family
    for start in range(0, len(rl) - 23, 24):  # full batches (the stream drops the rest)
      assert collections.Counter(p.family for p in rl[start:start + 24]) == {"cadd": 12, "cmul": 12}
  assert pair_lib.rl_problems(cfg, 0) != pair_lib.rl_problems(cfg, 1)
  assert {p.problem for p in pair_lib.rl_problems(cfg, 0)} == {p.problem for p in pair_lib.rl_problems(cfg, 1)}
