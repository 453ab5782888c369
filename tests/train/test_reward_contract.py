"""A reward of your own: docs/configs.md's example runs, its partial credit is refused
by a method that counts successes unless reward.success_threshold says what counts,
and its stats may be None, a dict or a dataclass."""

import dataclasses
import pathlib
import re

import numpy as np
import pytest

from graft_jax.config import checks as config_checks
from graft_jax.config import run_config as config_lib
from graft_jax.rewards import RewardError, make_reward
from graft_jax.train import methods
from graft_jax.train.collect import Rollout, check_successes
from graft_jax.outputs.step_metrics import stats_dict

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "configs.md"


@pytest.fixture
def own_reward(tmp_path, monkeypatch):
  """docs/configs.md's "Your own reward" example, as the module it names."""
  section = DOCS.read_text().split("## Your own reward", 1)[1]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  (tmp_path / "my_reward.py").write_text(code)
  monkeypatch.syspath_prepend(str(tmp_path))
  return make_reward("my_reward:boxed_or_mentioned")


def config(**fields):
  cd = config_lib.config_dict()
  with cd.unlocked():
    config_lib.apply_overrides(cd, [f"{k}={v}" for k, v in fields.items()])
  return config_lib.from_config_dict(cd)


def rollout(rewards_GxN, threshold=0.0):
  b = rewards_GxN.size
  return Rollout("toy_a", None, [], [[]] * b, [""] * b, rewards_GxN, np.zeros_like(rewards_GxN),
                 [], np.zeros(b), success_threshold=threshold)


def test_the_docs_reward_runs_and_partial_credit_needs_a_threshold(own_reward):
  texts = ["so \\boxed{12}", "maybe 12 or 13", "\\boxed{7}", "12"]
  rewards, stats = own_reward(texts, ["12"] * 4)
  np.testing.assert_array_equal(rewards, [1.0, 0.5, 0.0, 0.5])
  assert stats_dict(stats) == {"boxed": 1}
  kind = "my_reward:boxed_or_mentioned"
  with pytest.raises(RewardError) as e:
    check_successes(rollout(rewards.reshape(1, 4)), config(**{"reward.kind": kind}))
  assert str(e.value) == (f"reward.kind {kind!r} returned 0.5 for toy_a, but method=graft "
                          "counts successes from 0/1 rewards; set reward.success_threshold "
                          "to the score that counts as one")
  cfg = config(**{"reward.kind": kind, "reward.success_threshold": 1})
  check_successes(rollout(rewards.reshape(1, 4), 1.0), cfg)
  assert rollout(rewards.reshape(2, 2), 1.0).k_G.tolist() == [1, 0]  # 0.5 is no success
  assert rollout(np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)).k_G.tolist() == [1, 2]


def test_only_grpo_reads_rewards_as_they_are():
  assert {n for n, m in methods.REGISTRY.items() if not m.counts_successes} == {"grpo"}


def test_the_threshold_is_locked_on_resume():
  assert config_checks.resume_locked("reward.success_threshold")


@dataclasses.dataclass
class Stats:
  total: int = 3
  note: str = "x"


@pytest.mark.parametrize("stats,want", [(None, {}), ({"a": 1}, {"a": 1}),
                                        (Stats(), {"total": 3, "note": "x"})])
def test_stats_may_be_none_a_dict_or_a_dataclass(stats, want):
  assert stats_dict(stats) == want
