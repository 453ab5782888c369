"""reward.kind picks the run's reward: math_verify, synthetic_exact, or a dotted path."""

import numpy as np
import pytest

from graft_jax import rewards
from graft_jax.config import run_config as config_lib
from graft_jax.train import trainer as trainer_lib

TEXTS = ["carry tens: 7+5+0=12. \\boxed{632}", "\\boxed{632.0}", "\\boxed{631}", "632",
         "\\boxed{1/2}", "\\boxed{x+1}", "\\boxed{1+x}", "\\boxed{2} then \\boxed{3}"]
GOLDS = ["632", "632", "632", "632", "0.5", "x+1", "x+1", "3"]
# By hand from the definition: the last box equals the gold as a number, or as a
# normalized string; no box scores 0 ("632" would pass math-verify's fallback).
EXACT = [1, 1, 0, 0, 1, 1, 0, 1]


def _cfg(tmp_path, **reward):
  cd = config_lib.load_config("configs/toy.py:graft")
  with cd.unlocked():
    cd.workdir = str(tmp_path)
    cd.reward.update(reward)
  return config_lib.from_config_dict(cd)


def test_synthetic_exact_by_hand(tmp_path):
  cfg = _cfg(tmp_path, kind="synthetic_exact")
  assert trainer_lib.make_reward_pool(cfg) is None  # no verifier processes
  got, stats = trainer_lib.config_reward(cfg)(TEXTS, GOLDS)
  assert got.dtype == np.float32 and got.tolist() == EXACT
  assert (stats.total, stats.correct, stats.no_boxed) == (8, 5, 1)


def test_math_verify_is_the_default(tmp_path):
  cfg = _cfg(tmp_path, num_workers=1)
  assert cfg.reward.kind == "math_verify"
  pool = trainer_lib.make_reward_pool(cfg)
  try:
    assert pool.num_workers == 1
    got, stats = trainer_lib.config_reward(cfg, pool)(["\\boxed{x+1}", "\\boxed{3}", "so 7"],
                                                      ["1+x", "4", "7"])
  finally:
    pool.close()
  assert got.tolist() == [1.0, 0.0, 1.0]  # math-verify's own extraction finds the unboxed 7
  assert stats.no_boxed == 1


def test_a_dotted_path_imports_your_function(tmp_path):
  cfg = _cfg(tmp_path, kind="tests.train.tiny_pair:contains_reward")
  config_lib.check_paths(cfg, pending=[cfg.model_a.path, cfg.model_b.path])
  assert trainer_lib.make_reward_pool(cfg) is None
  got, _ = trainer_lib.config_reward(cfg)(["say a", "say b", "c"], ["a", "c", "c"])
  assert got.tolist() == [1.0, 0.0, 1.0]


def bad_shape_reward(texts, golds):
  """A reward that breaks the contract: one value short."""
  return np.ones(len(texts) - 1), None


def test_a_reward_that_breaks_the_contract_is_named():
  fn = rewards.make_reward("tests.config.test_reward:bad_shape_reward")
  with pytest.raises(rewards.RewardError, match=r"reward.kind 'tests.config.test_reward:"
                     r"bad_shape_reward' must return 2 finite rewards, got shape \(1,\)"):
    fn(["a", "b"], ["a", "b"])


@pytest.mark.parametrize("kind,message", [
    ("tests.train.no_such_module:f", "reward.kind 'tests.train.no_such_module:f': cannot import "
     "'tests.train.no_such_module' (ModuleNotFoundError"),
    ("tests.train.tiny_pair:no_such_function", "reward.kind 'tests.train.tiny_pair:"
     "no_such_function': tests.train.tiny_pair has no function 'no_such_function'"),
])
def test_a_dotted_path_that_does_not_import_is_a_config_error(tmp_path, kind, message):
  cfg = _cfg(tmp_path, kind=kind)  # the syntax is fine: validation does not import
  with pytest.raises(config_lib.ConfigError) as err:
    config_lib.check_paths(cfg, pending=[cfg.model_a.path, cfg.model_b.path])
  assert str(err.value).startswith(message) and err.value.field == "reward.kind"
