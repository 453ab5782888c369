"""The method registry: every configurable method has a module, and nothing else is looked up."""

import dataclasses

import pytest

from graft_jax.train import methods

from graft_jax.config import checks as config_checks
from tests.train.methods import helpers


def test_registry_matches_the_config_choices():
  assert set(methods.REGISTRY) == set(config_checks.METHODS)
  for name, cls in methods.REGISTRY.items():
    assert cls.name == name


def test_an_unknown_method_names_the_field():
  cfg = helpers.config("graft")
  cfg = dataclasses.replace(cfg, method="ppo")
  with pytest.raises(ValueError, match="method: unknown 'ppo'"):
    methods.make(cfg)


def test_replay_peer_is_not_trained():
  cfg = helpers.config("replay", **{"replay.log_dir": "/nonexistent"})
  assert methods.trains(cfg, cfg.model_a) and not methods.trains(cfg, cfg.model_b)
  cfg = helpers.config("graft")
  assert methods.trains(cfg, cfg.model_a) and methods.trains(cfg, cfg.model_b)
