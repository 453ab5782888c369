"""GRPO's ``build_rows``: own groups only; with two policies, the pair statistics."""

import numpy as np

from graft_jax.train import methods
from graft_jax.train.methods.base import ClippedTokenLoss
from tests.train.methods import helpers


def test_own_rows_and_pair_statistics():
  _, _, rolls, method, out = helpers.build("grpo")
  for name, roll in rolls.items():
    rows, _ = out[name]
    assert rows.response_ids == roll.response_ids and not any(rows.grafted)
    np.testing.assert_allclose(rows.adv, roll.adv_GxN.reshape(-1))
    assert rows.group == [b // helpers.N for b in range(helpers.G * helpers.N)]
  # A fails q0, q1, q3; B solved some of q0 and q3: complementarity 2/3; q0 is A's one candidate.
  assert out["toy_a"][1].metrics() == {"complementarity": 2 / 3, "candidates": 1}
  assert out["toy_b"][1].metrics() == {"complementarity": 0.0, "candidates": 0}
  assert method.step_metrics(out) == {}


def test_one_policy_has_no_peer_and_no_statistics():
  cfg = helpers.config("grpo")
  pols = helpers.policies(cfg)
  rolls = {"toy_a": helpers.rollout(pols["toy_a"], helpers.R_A)}
  method = methods.make(cfg)
  peers = method.peers(rolls, helpers.problems(), 0)
  assert peers == {}
  (rows, stats), = method.build_rows(pols, rolls, peers, None).values()
  assert stats is None and len(rows) == helpers.G * helpers.N


def test_loss_and_minibatches():
  cfg = helpers.config("grpo", num_minibatches=1)
  method = methods.make(cfg)
  assert method.loss_fn == ClippedTokenLoss(temperature=cfg.rollout.temperature)
  assert method.num_minibatches(helpers.G) == 1 and method.order() == "peer_last"
