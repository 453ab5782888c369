"""SGT's ``build_rows``: own groups plus one NLL row per prompt, active where it applies."""

import jax
import numpy as np

from graft_jax.train import methods
from graft_jax.train.update_rows import KIND_PPO, KIND_SGT
from tests.train.methods import helpers

# SGT applies on q0 (A 0/4, B 2/4) and q3 (A 0/4, B 4/4); not q1 (B 0/4) or q2 (A 2/4).
R_B = helpers.R_B


def test_one_nll_row_per_prompt_from_a_correct_peer_response():
  cfg, pols, rolls, method, out = helpers.build("sgt", key=jax.random.key(0))
  rows, stats = out["toy_a"]
  n = helpers.N
  assert len(rows) == helpers.G * (n + 1)
  sgt = [i for i in range(len(rows)) if rows.kind[i] == KIND_SGT]
  assert sgt == [n, 2 * n + 1, 3 * n + 2, 4 * n + 3]  # each group's n own rows, then its SGT row
  assert [rows.keep[i] for i in sgt] == [True, False, False, True]
  a = pols["toy_a"]
  for q in (0, 3):
    i = sgt[q]
    # The response is one of the peer's correct ones, re-tokenized by the receiver.
    correct = [a.encode_response(helpers.TEXTS[q * n + j], True) for j in range(n) if R_B[q][j]]
    assert rows.response_ids[i] in correct and rows.grafted[i]
  for q in (1, 2):
    assert rows.response_ids[sgt[q]] == []
  own = [i for i in range(len(rows)) if rows.kind[i] == KIND_PPO]
  np.testing.assert_allclose([rows.adv[i] for i in own], rolls["toy_a"].adv_GxN.reshape(-1))
  assert (stats.sgt_active, stats.candidates, stats.dropped_empty) == (2, 1, 0)
  assert out["toy_b"][1].sgt_active == 0  # B fails only q1, where A has no correct response
  assert method.loss_fn.sgt_coef == cfg.sgt.coef


def test_order_is_uniform_with_or_without_graft_selection():
  for preset in ("sgt", "sgt_graft_prompts"):
    assert methods.make(helpers.config(preset)).order() == "uniform"
