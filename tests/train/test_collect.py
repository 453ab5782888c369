"""collect_all with in-process (JAX) engines: the models take turns, in the given order, and
each model's rollout is the one `collect` gives for its seed."""

import numpy as np
import pytest

from configs import toy
from graft_jax.config import run_config as config_lib
from graft_jax.train.collect import collect, collect_all
from graft_jax.train.policy import make_policy
from tests.train import tiny_pair

SEEDS = {"toy_b": 11, "toy_a": 5}


def _cfg(**rollout):
  cd = toy.get_config("graft")
  with cd.unlocked():
    cd.prompts_per_step, cd.n, cd.max_response_len = 4, 2, 8
    for field, value in rollout.items():
      setattr(cd.rollout, field, value)
  return config_lib.from_config_dict(cd)


@pytest.fixture(scope="module")
def policies():
  """B first: the results must follow the dict's order, not the names'."""
  cfg, models = _cfg(), tiny_pair.make_models()
  return {name: make_policy(name, *models[key], cfg.optimizer, cfg.data.prompt_suffix)
          for name, key in (("toy_b", "b"), ("toy_a", "a"))}


def test_in_process_engines_take_turns_and_match_collect(policies):
  cfg, problems = _cfg(), tiny_pair.problems(4)
  assert not any(getattr(p.engine, "out_of_process", False) for p in policies.values())
  timings = {}
  rolls = collect_all(policies, problems, cfg, tiny_pair.contains_reward, SEEDS, timings)
  assert list(rolls) == ["toy_b", "toy_a"]
  # One after the other: A starts sampling only once B's batch is back.
  assert 0 <= timings["toy_b/sample_start_s"] < timings["toy_b/sample_end_s"]
  assert timings["toy_b/sample_end_s"] <= timings["toy_a/sample_start_s"]
  assert timings["toy_a/sample_start_s"] < timings["toy_a/sample_end_s"]
  for name, roll in rolls.items():
    alone = collect(policies[name], problems, cfg, tiny_pair.contains_reward, SEEDS[name], {})
    assert roll.name == name
    assert roll.response_ids == alone.response_ids
    assert roll.texts == alone.texts
    np.testing.assert_array_equal(roll.rewards_GxN, alone.rewards_GxN)
    np.testing.assert_array_equal(roll.gen_mean_logp_B, alone.gen_mean_logp_B)
    assert timings[f"{name}/sample_s"] > 0 and f"{name}/reward_s" in timings
  # The seeds matter: the other model's seed gives other responses.
  other = collect(policies["toy_a"], problems, cfg, tiny_pair.contains_reward, SEEDS["toy_b"], {})
  assert other.response_ids != rolls["toy_a"].response_ids


def test_on_refuses_an_in_process_engine_before_sampling(policies):
  timings = {}
  with pytest.raises(config_lib.ConfigError) as err:
    collect_all(policies, tiny_pair.problems(4), _cfg(concurrent="on"),
                tiny_pair.contains_reward, SEEDS, timings)
  assert str(err.value) == (
      "rollout.concurrent='on' needs every engine out of process (vLLM); the engine of "
      "toy_b, toy_a runs in process: use 'auto' or 'off'")
  assert err.value.field == "rollout.concurrent"
  assert timings == {}


def test_a_bad_value_is_one_line():
  with pytest.raises(config_lib.ConfigError) as err:
    _cfg(concurrent="yes")
  assert str(err.value) == "rollout.concurrent must be one of auto, on, off, got 'yes'"
