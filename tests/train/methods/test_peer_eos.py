"""A peer response that is EOS alone is carried as a wrong answer, not dropped.

B's q1 group (rewards 1, 1, 0, 1) reaches A under GRAFT (the selection of
tests/train/methods/test_graft.py); B's third response there is EOS alone: no
text, finished, reward 0. Worked by hand: B's GRPO advantages on q1 are
(r - 0.75) / std(r, ddof=1) = (r - 0.75) / 0.5: +0.5 for the three correct and
-1.5 for the empty one, which A takes with its row (A's EOS), A's old log-prob of that EOS
and, with B's stored log-prob set so that s = 0.9, gate weight 0.9.
"""

import math

import numpy as np
import pytest

from graft_jax.train import methods
from tests.core import reference
from tests.train.methods import helpers

R_A = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
R_B = [[1, 0, 1, 0], [1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
EMPTY = 6  # B's row q1, j = 2
TEXTS = helpers.TEXTS[:EMPTY] + [""] + helpers.TEXTS[EMPTY + 1:]


def test_eos_only_peer_response_is_a_wrong_answer_with_its_advantage():
  cfg = helpers.config("graft")
  pols = helpers.policies(cfg)
  a = pols["toy_a"]
  assert a.encode_response("", True) == [a.eos_id] and a.encode_response("", False) == []
  prompt = a.prompt_ids(helpers.problems()[1].problem)
  lbar_eos = helpers.logp_numpy(a, prompt, [a.eos_id]).mean()
  gen_mean_b = np.full(16, -2.0, np.float32)
  gen_mean_b[EMPTY] = lbar_eos - math.log(0.9)
  rolls = {"toy_a": helpers.rollout(a, R_A),
           "toy_b": helpers.rollout(pols["toy_b"], R_B, gen_mean_B=gen_mean_b, texts=TEXTS)}
  method = methods.make(cfg)
  method.start(list(rolls), None)
  out = method.build_rows(pols, rolls, method.peers(rolls, helpers.problems(), 0), None)
  rows, stats = out["toy_a"]
  assert [i for i in range(len(rows)) if rows.grafted[i]] == [4, 5, 6, 7]
  assert rows.response_ids[EMPTY] == [a.eos_id] and rows.keep[EMPTY]
  adv = reference.grpo_adv(np.array(R_B, np.float64))[1]
  assert adv[2] == pytest.approx(-1.5, rel=1e-4)  # the worked value
  assert rows.adv[EMPTY] == pytest.approx(adv[2], rel=1e-6)
  assert rows.weight[EMPTY] == pytest.approx(0.9, rel=1e-4)
  np.testing.assert_allclose(rows.old_logp[EMPTY], [lbar_eos], atol=1e-4)
  assert stats.dropped_empty == 0 and stats.peer_offered == 4
