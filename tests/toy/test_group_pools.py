"""The toy trio's pools: disjoint over three families and three warm starts, priors exact,
the stream balanced; the pair's build inputs untouched."""

import collections

import pytest

from graft_jax.data import synthetic_borrow as borrow
from graft_jax.data import synthetic_columns as columns
from graft_jax.toy import group_pools, pools
from graft_jax.toy import pair as pair_lib
from graft_jax.toy import spec


@pytest.fixture(scope="module")
def cfg():
  return spec.trio_config()


def test_trio_pools_are_disjoint_and_sized(cfg):
  built = pair_lib.make_pools(cfg)
  named = group_pools.named(built, [m.name for m in cfg.models])
  assert set(named) == {"rl", "eval", "warm_toy_a", "drill_toy_a", "warm_toy_b", "drill_toy_b",
                        "warm_toy_c", "drill_toy_c"}
  texts = [p.problem for probs in named.values() for p in probs]
  assert len(texts) == len(set(texts))  # no problem in two pools (nor twice in one)
  for name, probs in named.items():
    want = {"rl": cfg.rl_per_family, "eval": cfg.eval_per_family}.get(
        name, cfg.warm_per_family if name.startswith("warm") else cfg.drill_per_family)
    assert collections.Counter(p.family for p in probs) == {
        "cadd": want, "cmul": want, "csub": want}, name
  for p in built.rl:
    if p.family == "csub":
      a, b = borrow.operands(p.problem)
      assert p.answer == str(a - b) and p.solution == borrow.trace(a, b, "correct")[0]


def test_overlap_between_two_warm_starts_is_refused(cfg):
  built = pair_lib.make_pools(cfg)
  warm = (built.warm[0], built.warm[1] + built.warm[0][:1], built.warm[2])
  with pytest.raises(ValueError, match="'warm_toy_a' and 'warm_toy_b' share 1 problems"):
    pools.check_disjoint(group_pools.named(
        pools.Pools(eval=built.eval, rl=built.rl, warm=warm, drill=built.drill),
        ["toy_a", "toy_b", "toy_c"]))


def test_trio_warm_rows_follow_each_models_priors(cfg):
  built = pair_lib.make_pools(cfg)
  for index, model in enumerate(cfg.models):
    rows = group_pools.warm_rows(model, built, index, seed=cfg.seed)
    traced = [(p, t) for p, g, t in rows if not g]
    drills = [(p, g, t) for p, g, t in rows if g]
    for family, prior in model.competence:
      opens = [t.split(":")[0].strip() for p, t in traced
               if p.startswith({"cadd": "Add", "cmul": "Mul", "csub": "Sub"}[family])]
      good = group_pools.strategy_prefix(family, columns.CORRECT).rstrip(":")
      assert len(opens) == cfg.warm_per_family
      assert opens.count(good) == round(prior * cfg.warm_per_family), (model.name, family)
    assert len(drills) == 2 * 3 * cfg.drill_per_family  # both procedures, three families
    for problem, given, target in drills:
      if problem.startswith("Sub"):
        rule = columns.RULES[borrow.WORDS["csub"].index(given.split()[1].rstrip(":"))]
        assert given.strip() + target == borrow.trace(*borrow.operands(problem), rule)[0]
  # toy_c is the strong one on subtraction; toy_a / toy_b the strong ones on their families.
  assert [m.strong_family for m in cfg.models] == ["cadd", "cmul", "csub"]


def test_trio_stream_is_balanced_over_three_families(cfg):
  rl = pair_lib.rl_problems(cfg, 1)
  assert len(rl) == 3 * cfg.rl_per_family
  for start in range(0, len(rl) - 23, 24):  # configs/toy3.py's 24 prompts per step
    assert collections.Counter(p.family for p in rl[start:start + 24]) == {
        "cadd": 8, "cmul": 8, "csub": 8}


def test_the_trio_leaves_the_shipped_pairs_key_alone(cfg):
  # The pair's key hashes its settings and pools.py / synthetic*.py; the trio adds its own
  # modules to its own key only. c4644c8214ca5e19 is the shipped pair's recorded key.
  assert spec.cache_key(spec.default_config()) == pair_lib.read_record(pair_lib.PREBUILT)["key"]
  assert spec.cache_key(spec.default_config()) == "c4644c8214ca5e19"
  assert spec.cache_key(cfg) not in {spec.cache_key(spec.default_config()),
                                     spec.cache_key(spec.trio_config(1))}
  assert "more" not in spec.default_config().to_json()
