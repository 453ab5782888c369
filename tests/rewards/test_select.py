"""A reward of your own that returns NaN is stopped with a line that says NaN and where."""

import numpy as np
import pytest

from graft_jax import rewards


def nan_reward(texts, golds):
  """Scores every text 1, but the second NaN."""
  out = np.ones(len(texts), np.float32)
  out[1] = np.nan
  return out, None


def test_a_nan_reward_is_named_with_its_text():
  fn = rewards.make_reward("tests.rewards.test_select:nan_reward")
  with pytest.raises(rewards.RewardError,
                     match=r"^reward.kind 'tests.rewards.test_select:nan_reward' must return "
                           r"finite rewards, got nan for text 1 \(1 of 3 non-finite\)$"):
    fn(["a", "b", "c"], ["a", "b", "c"])
