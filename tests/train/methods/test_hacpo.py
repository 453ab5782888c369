"""HACPO's ``build_rows``: pooled groups with capability-weighted advantages, and its state."""

import numpy as np
import pytest

from graft_jax.train import methods
from graft_jax.train.methods.hacpo import HacpoBatch, HacpoLoss
from graft_jax.train.update_rows import typed_batch
from tests.train.methods import helpers

R_A, R_B = helpers.R_A, helpers.R_B


def pooled_adv_numpy(r_own, r_peer, c_peer):
  """HACPO's advantages of one prompt (arXiv 2603.02604), float64: baseline mean(r / c)
  (c = 1 for own samples; the plain mean for a uniform group; the own mean when above 1),
  scaled by the pooled std (ddof 1)."""
  r = np.concatenate([r_own, r_peer]).astype(np.float64)
  c = np.concatenate([np.ones(len(r_own)), np.full(len(r_peer), c_peer)])
  b = r.mean() if r.max() == r.min() else (r / c).mean()
  b = np.mean(r_own) if b > 1 else b
  return (r - b) / (r.std(ddof=1) + 1e-6)


@pytest.fixture(scope="module")
def built():
  return helpers.build("hacpo")


def test_pooled_rows_and_advantages(built):
  cfg, pols, rolls, method, out = built
  rows, stats = out["toy_a"]
  n = helpers.N
  # Success rates after one step: A 2/16, B 8/16; A's peer weight P_B / P_A = 4.
  c = (8 / 16) / (2 / 16)
  assert stats.cap_ratio == pytest.approx(c) and stats.peer_offered == helpers.G * n
  assert len(rows) == 2 * helpers.G * n
  for q in range(helpers.G):
    idx = list(range(2 * n * q, 2 * n * (q + 1)))
    hacpo = typed_batch(HacpoBatch, rows, idx, 0)  # HACPO's own columns, as its loss reads them
    assert hacpo.is_self.tolist() == [True] * n + [False] * n
    np.testing.assert_allclose([rows.adv[i] for i in idx],
                               pooled_adv_numpy(R_A[q], R_B[q], c), rtol=1e-5, atol=1e-6)
    peer = idx[n:]
    assert [rows.response_ids[i] for i in peer] == [
        pols["toy_a"].encode_response(t, True) for t in helpers.TEXTS[q * n:(q + 1) * n]]
    np.testing.assert_allclose(hacpo.src_mean_logp[n:],
                               [rolls["toy_b"].old_logp[b].mean() for b in range(q * n, (q + 1) * n)],
                               rtol=1e-6)
    np.testing.assert_allclose(hacpo.cap_ratio[n:], c, rtol=1e-6)
  # The KL reference: the receiver's initial parameters, over every row.
  a = pols["toy_a"]
  np.testing.assert_allclose(rows.ref_logp[n], helpers.logp_numpy(a, rows.prompt_ids[n],
                                                                   rows.response_ids[n]), atol=1e-4)
  assert out["toy_b"][1].cap_ratio == pytest.approx(1 / c)


def test_state_round_trip_and_loss(built):
  cfg, _, _, method, _ = built
  state = method.state_dict()
  assert state["capability"]["steps"] == 1
  fresh = methods.make(cfg)
  fresh.load_state_dict(state)
  assert fresh.state_dict() == state
  assert fresh.capability.ratio("toy_b", "toy_a") == pytest.approx(4.0)
  h = cfg.hacpo
  assert method.loss_fn == HacpoLoss(
      temperature=cfg.rollout.temperature, self_clip=tuple(h.self_clip), cross_clip=h.cross_clip,
      cross_step=h.cross_clip_step, kl_coef=h.kl_coef)
  assert method.num_minibatches(helpers.G) == 2  # minibatch_prompts = 2 of G = 4
  assert method.keeps_reference
