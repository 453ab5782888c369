"""GRAFT's ``build_rows``: selection, re-tokenization, gate weights and statistics, by hand.

k_A = [0, 0, 2, 0], k_B = [2, 3, 0, 4] (n = 4): A's candidates are q0 (k_B 2) and
q1 (k_B 3) (q3 is all-pass for B), B's is q2; m = 1, so A takes q1 only and B
takes q2. B's stored generation log-probs on q1 are set so that s, computed
from a float64 forward pass of A, is 1.3, 0.95, 0.85 and 0.5.
"""

import numpy as np
import pytest

from graft_jax.train import methods
from graft_jax.train.methods.base import ClippedTokenLoss
from tests.core import reference
from tests.train.methods import helpers

R_A = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
R_B = [[1, 0, 1, 0], [1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
S_TARGET = np.array([1.3, 0.95, 0.85, 0.5])


@pytest.fixture(scope="module")
def built():
  a = helpers.policies(helpers.config("graft"))["toy_a"]
  prompt = a.prompt_ids(helpers.problems()[1].problem)
  # A's mean log-prob of B's q1 responses, in A's tokenization (EOS: B finished them).
  lbar = np.array([helpers.logp_numpy(a, prompt, a.encode_response(t, True)).mean()
                   for t in helpers.TEXTS[4:8]])
  gen_mean_b = np.full(16, -2.0, np.float32)
  gen_mean_b[4:8] = lbar - np.log(S_TARGET)
  return (*helpers.build("graft", r_a=R_A, r_b=R_B, gen_mean_b=gen_mean_b), lbar)


def test_selection_and_statistics(built):
  cfg, _, rolls, method, out, _ = built
  a_recv, b_recv = reference.exchange([0, 0, 2, 0], [2, 3, 0, 4], helpers.N)
  assert a_recv.tolist() == [False, True, False, False] and b_recv.tolist() == [False, False, True, False]
  stats_a = out["toy_a"][1].metrics()
  assert {k: stats_a[k] for k in ("complementarity", "candidates", "grafted_groups",
                                  "peer_offered", "admitted", "dropped_empty",
                                  "dropped_nonfinite")} == dict(
      complementarity=1.0, candidates=2, grafted_groups=1, peer_offered=4, admitted=3,
      dropped_empty=0, dropped_nonfinite=0)
  assert stats_a["s_p50"] == pytest.approx(np.median(S_TARGET), rel=1e-4)
  assert stats_a["s_mean"] == pytest.approx(S_TARGET.mean(), rel=1e-4)
  stats_b = out["toy_b"][1]
  assert (stats_b.candidates, stats_b.grafted_groups, stats_b.peer_offered) == (1, 1, 4)
  assert method.step_metrics(out) == {"m": 1}


def test_rows_of_a_grafted_group(built):
  _, pols, rolls, _, out, lbar = built
  a, rows = pols["toy_a"], out["toy_a"][0]
  assert len(rows) == helpers.G * helpers.N and rows.group == sorted(rows.group)
  grafted = [i for i in range(len(rows)) if rows.grafted[i]]
  assert grafted == [4, 5, 6, 7]
  adv_b = reference.grpo_adv(np.array(R_B, np.float64))
  for j, i in enumerate(grafted):
    want_ids = a.encode_response(helpers.TEXTS[4 + j], True)
    assert rows.response_ids[i] == want_ids and rows.prompt_ids[i] == rolls["toy_a"].prompt_ids[1]
    assert rows.adv[i] == pytest.approx(adv_b[1, j], rel=1e-6)  # the source's advantages
    # Old log-probs: the receiver's, over its own tokens of the peer's text.
    np.testing.assert_allclose(rows.old_logp[i], helpers.logp_numpy(a, rows.prompt_ids[i], want_ids),
                               atol=1e-4)
  s = S_TARGET
  assert rows.keep[4:8] == list(s > 0.8)
  np.testing.assert_allclose(rows.weight[4:8], np.where(s > 0.8, np.minimum(s, 1.0), 0.0),
                             rtol=1e-4)
  # Own groups pass through untouched.
  for i in (0, 8, 15):
    assert rows.response_ids[i] == rolls["toy_a"].response_ids[i] and not rows.grafted[i]
    assert rows.weight[i] == 1.0 and rows.adv[i] == pytest.approx(rolls["toy_a"].adv_GxN.flat[i])


def test_the_source_rollout_records_the_gate(built):
  _, _, rolls, _, out, _ = built
  gate = rolls["toy_b"].peer_gate
  assert gate["offered"].tolist() == [4 <= b < 8 for b in range(16)]
  np.testing.assert_allclose(gate["s"][4:8], S_TARGET, rtol=1e-4)
  assert gate["admitted"][4:8].tolist() == [True, True, True, False]


def test_loss_and_order_follow_the_config():
  cfg = helpers.config("graft", **{"graft.ratio_level": "sequence", "graft.order": "peer_first"})
  method = methods.make(cfg)
  assert method.loss_fn == ClippedTokenLoss(ratio_level="sequence",
                                            temperature=cfg.rollout.temperature)
  assert method.order() == "peer_first" and method.num_minibatches(helpers.G) == 2
