"""The method registry: every configurable method has a module, and nothing else is looked up."""

import dataclasses

import pytest

from graft_jax.train import methods

from graft_jax.config import run_config as config_lib
from tests.train.methods import helpers


def test_registry_names_each_method_by_its_name():
  for name, cls in methods.REGISTRY.items():
    assert cls.name == name


def test_an_unknown_method_is_one_line_before_any_other_field():
  cd = config_lib.config_dict()
  with cd.unlocked():
    cd.method, cd.n = "grop", 1  # n=1 is invalid too: the method is named first
  with pytest.raises(config_lib.ConfigError) as e:
    methods.from_config_dict(cd)
  assert str(e.value) == (f"method must be one of {', '.join(methods.REGISTRY)}, got 'grop' "
                          f"(did you mean 'grpo'?)")
  assert e.value.field == "method"
  cfg = dataclasses.replace(helpers.config("graft"), method="ppo")
  with pytest.raises(config_lib.ConfigError, match="^method must be one of .*, got 'ppo'$"):
    methods.make(cfg)


@pytest.mark.parametrize("fields, message", [
    ({"method": "replay"}, "method=replay needs replay.log_dir"),
    ({"method": "hacpo", "hacpo.minibatch_prompts": 48},
     "hacpo.minibatch_prompts (48) must divide prompts_per_step (128)"),
])
def test_a_method_checks_its_own_settings(fields, message):
  cd = config_lib.config_dict()
  with cd.unlocked():
    config_lib.apply_overrides(cd, [f"{k}={v}" for k, v in fields.items()])
  config_lib.from_config_dict(cd)  # the config alone knows nothing of the method's needs
  with pytest.raises(config_lib.ConfigError) as e:
    methods.from_config_dict(cd)
  assert str(e.value) == message


def test_the_planner_asks_the_method_which_peer_rows_it_scores():
  want = {"graft": "picked", "replay": "picked", "hacpo": "all", "grpo": None, "sgt": None}
  assert {n: methods.REGISTRY[n].peer_scoring for n in want} == want


def test_replay_peer_is_not_trained():
  cfg = helpers.config("replay", **{"replay.log_dir": "/nonexistent"})
  assert methods.trains(cfg, cfg.model_a) and not methods.trains(cfg, cfg.model_b)
  cfg = helpers.config("graft")
  assert methods.trains(cfg, cfg.model_a) and methods.trains(cfg, cfg.model_b)
