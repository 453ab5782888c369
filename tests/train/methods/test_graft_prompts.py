"""SGT's and HACPO's updates restricted to GRAFT's selected prompts (``*_graft_prompts``).

The rewards below make GRAFT's selection differ from both baselines' own: A has
two exchange candidates and B one, so balancing keeps only A's better one, and
on q3 the peer passes every sample (SGT's rule applies, GRAFT's does not).
"""

import jax
import numpy as np
import pytest

from graft_jax.train.methods.graft import selected_sources
from graft_jax.train.methods.hacpo import HacpoGrpoBatch, HacpoLoss, HacpoOnSelectedLoss
from graft_jax.train.update_rows import KIND_HACPO, KIND_PPO, KIND_SGT, typed_batch
from tests.core import reference
from tests.train.methods import helpers
from tests.train.methods.test_hacpo import pooled_adv_numpy

N, G = helpers.N, helpers.G
# k_A = (0, 0, 2, 0), k_B = (2, 1, 0, 4).
R_A = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
R_B = [[0, 1, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
# By hand: A's candidates (k_A = 0, 1 <= k_B <= 3) are q0 (k_B 2) and q1 (k_B 1); B's
# (k_B = 0, 1 <= k_A <= 3) is q2. m = min(2, 1) = 1: A keeps its top one by k_B, q0.
SELECTED = {"toy_a": [True, False, False, False], "toy_b": [False, False, True, False]}
# SGT's own rule (receiver 0/n, peer >= 1 correct): A on q0, q1, q3; B on q2.
SGT_OWN = {"toy_a": [True, True, False, True], "toy_b": [False, False, True, False]}


def build(preset):
  return helpers.build(preset, r_a=R_A, r_b=R_B, key=jax.random.key(0))


def test_presets_set_the_field():
  for preset, method, field, value in (("sgt_graft_prompts", "sgt", "sgt", "graft_selected"),
                                       ("hacpo_graft_prompts", "hacpo", "hacpo", "graft_selected"),
                                       ("sgt", "sgt", "sgt", "own_failures"),
                                       ("hacpo", "hacpo", "hacpo", "all")):
    cfg = helpers.config(preset)
    assert cfg.method == method and getattr(cfg, field).prompts == value


def test_selection_is_grafts():
  _, _, rolls, _, out = build("graft")
  sources = selected_sources(rolls, N, balance=True)
  assert {r: [s is not None for s in v] for r, v in sources.items()} == SELECTED
  for name, (rows, _) in out.items():  # the groups GRAFT replaced are exactly these
    grafted_G = [any(g for g, q in zip(rows.grafted, rows.group) if q == p) for p in range(G)]
    assert grafted_G == SELECTED[name]


@pytest.mark.parametrize("preset, active", [("sgt", SGT_OWN), ("sgt_graft_prompts", SELECTED)])
def test_sgt_nll_rows(preset, active):
  _, pols, rolls, _, out = build(preset)
  for name, peer, r_peer in (("toy_a", "toy_b", R_B), ("toy_b", "toy_a", R_A)):
    rows, stats = out[name]
    assert len(rows) == G * (N + 1)
    sgt = [i for i in range(len(rows)) if rows.kind[i] == KIND_SGT]
    assert sgt == [N, 2 * N + 1, 3 * N + 2, 4 * N + 3]
    assert [rows.keep[i] for i in sgt] == active[name]
    assert stats.sgt_active == sum(active[name])
    recv = pols[name]
    for q in range(G):
      i = sgt[q]
      if active[name][q]:  # one of the peer's correct responses, in the receiver's tokens
        correct = [recv.encode_response(helpers.TEXTS[q * N + j], True)
                   for j in range(N) if r_peer[q][j]]
        assert rows.response_ids[i] in correct and rows.grafted[i]
      else:
        assert rows.response_ids[i] == [] and not rows.grafted[i]
    own = [i for i in range(len(rows)) if rows.kind[i] == KIND_PPO]
    np.testing.assert_allclose([rows.adv[i] for i in own], rolls[name].adv_GxN.reshape(-1))


def test_hacpo_pools_only_the_selected_prompts():
  _, pols, rolls, method, out = build("hacpo_graft_prompts")
  # Success rates after one step: A 2/16, B 7/16; A's peer weight P_B / P_A.
  c = {"toy_a": (7 / 16) / (2 / 16), "toy_b": (2 / 16) / (7 / 16)}
  for name, r_own, r_peer, peer in (("toy_a", R_A, R_B, "toy_b"), ("toy_b", R_B, R_A, "toy_a")):
    rows, stats = out[name]
    assert len(rows) == 2 * G * N
    assert stats.cap_ratio == pytest.approx(c[name])
    assert (stats.peer_offered, stats.grafted_groups) == (N, 1)
    for q in range(G):
      idx = list(range(2 * N * q, 2 * N * (q + 1)))
      own, slots = idx[:N], idx[N:]
      hacpo = typed_batch(HacpoGrpoBatch, rows, idx, 0)  # HACPO's own columns
      assert hacpo.is_self.tolist() == [True] * N + [False] * N
      if SELECTED[name][q]:
        want = pooled_adv_numpy(r_own[q], r_peer[q], c[name])
        assert [rows.response_ids[i] for i in slots] == [
            pols[name].encode_response(t, True) for t in helpers.TEXTS[q * N:(q + 1) * N]]
        assert all(rows.keep[i] and rows.grafted[i] for i in slots)
        np.testing.assert_allclose(hacpo.src_mean_logp[N:],
                                   [rolls[peer].old_logp[b].mean()
                                    for b in range(q * N, (q + 1) * N)], rtol=1e-6)
      else:  # the receiver's own group alone, GRPO's; the peer's slots stay empty
        want = np.concatenate([reference.grpo_adv(np.array([r_own[q]], np.float64))[0],
                               np.zeros(N)])
        assert all(rows.response_ids[i] == [] and not rows.keep[i] and not rows.grafted[i]
                   for i in slots)
      # HACPO's loss on the selected prompts' rows, GRPO's on every other.
      assert {rows.kind[i] for i in idx} == {KIND_HACPO if SELECTED[name][q] else KIND_PPO}
      np.testing.assert_allclose([rows.adv[i] for i in idx], want, rtol=1e-5, atol=1e-6)
      assert all(rows.keep[i] for i in own)
  assert method.order() == "uniform"
  assert isinstance(method.loss_fn, HacpoOnSelectedLoss)
  assert isinstance(helpers.build("hacpo")[3].loss_fn, HacpoLoss)


def test_hacpo_unrestricted_pools_every_prompt():
  _, _, _, _, out = build("hacpo")
  rows, stats = out["toy_a"]
  assert stats.peer_offered == G * N and stats.grafted_groups is None
  assert all(rows.keep[i] for i in range(len(rows)))
