"""Replay's selection (every candidate, one way), its trained policy, and its state."""

import numpy as np
import pytest

from graft_jax.train import methods
from tests.core import reference
from tests.train.methods import helpers


def test_only_the_first_model_trains_and_it_takes_every_candidate():
  cfg = helpers.config("replay", **{"replay.log_dir": "/nonexistent"})
  method = methods.make(cfg)
  assert method.trained(["toy_a", "toy_b"]) == ["toy_a"]
  pols = helpers.policies(cfg)
  k_a, k_b = [0, 0, 2, 0], [2, 3, 0, 1]
  r_a = [[0] * 4, [0] * 4, [1, 1, 0, 0], [0] * 4]
  r_b = [[1, 1, 0, 0], [1, 1, 1, 0], [0] * 4, [1, 0, 0, 0]]
  roll_a, roll_b = helpers.rollout(pols["toy_a"], r_a), helpers.rollout(pols["toy_b"], r_b)
  got = method.receives({"toy_a": roll_a}, {"toy_a": {"toy_b": roll_b}})["toy_a"]
  want, _ = reference.exchange(k_a, k_b, helpers.N, balance=False)
  assert got == ["toy_b" if w else None for w in want]
  assert sum(s is not None for s in got) == 3  # balancing would have kept none: B has no candidate


def test_peers_before_start_name_the_missing_step():
  method = methods.make(helpers.config("replay", **{"replay.log_dir": "/nonexistent"}))
  with pytest.raises(RuntimeError, match="start"):
    method.peers({"toy_a": None}, [], 0)


def test_missing_count_round_trips_before_start():
  method = methods.make(helpers.config("replay", **{"replay.log_dir": "/nonexistent"}))
  method.load_state_dict({"missing": 3})
  assert method.state_dict() == {"missing": 3}
