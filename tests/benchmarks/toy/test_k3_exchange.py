"""The K = 3 exchange table read back from peer logs written by the run's own writer,
against counts made by hand."""

import numpy as np
import pytest

from benchmarks.toy import k3_exchange
from graft_jax.outputs import peer_log


def _write(tmp_path):
  """toy_c's step 1: four responses to prompt p (family csub), offered to toy_a and toy_b."""
  w = peer_log.PeerLogWriter(tmp_path / "peer_logs", "toy_c", tokenizer_name="t",
                             vocab_hash=peer_log.vocab_hash({"a": 0}))
  rewards = [1.0, 1.0, 0.0, 0.0]
  adv = [1.0, 1.0, -1.0, -1.0]
  # toy_a admits only the wrong ones (s 1.0), toy_b only the correct ones (s 0.9).
  receivers = [[{"receiver": "toy_a", "s": s_a, "admitted": s_a >= 0.8, "weight": w_a},
                {"receiver": "toy_b", "s": s_b, "admitted": s_b >= 0.8, "weight": w_b}]
               for s_a, w_a, s_b, w_b in ((0.5, 0.0, 0.9, 0.9), (0.6, 0.0, 0.9, 0.9),
                                          (1.0, 1.0, 0.5, 0.0), (1.0, 1.0, 0.4, 0.0))]
  gate = {"offered": [True] * 4, "s": [r[0]["s"] for r in receivers],
          "admitted": [r[0]["admitted"] for r in receivers],
          "weight": [r[0]["weight"] for r in receivers], "receivers": receivers}
  w.write(1, prompt_ids=["p"] * 4, responses=["x"] * 4,
          response_ids=[np.array([1, 2], np.int32)] * 4, logprobs=[np.array([-1.0, -1.0])] * 4,
          rewards=rewards, advantages=adv, finished=[True] * 4, truncated=[False] * 4, gate=gate)


def test_offers_per_receiver_and_family(tmp_path):
  _write(tmp_path)
  df, offers = k3_exchange.exchange_rows(tmp_path, {"p": "csub"})
  assert len(df) == 4 and len(offers) == 8
  lines = {line.split()[0]: line for line in k3_exchange.offer_lines(offers)[1:]}
  # toy_a: 4 offered, half correct; admits none of the correct, all the wrong; the
  # admitted rows' A * w: correct 0, wrong 2 x (-1 x 1.0) = -2.
  assert lines["toy_a<-toy_c"].split()[2:] == ["4", "0.50", "0.00", "1.00", "0.55", "/",
                                               "1.00", "+0.0", "/", "-2.0"]
  # toy_b: the other way round: correct 2 x (1 x 0.9) = +1.8.
  assert lines["toy_b<-toy_c"].split()[2:] == ["4", "0.50", "1.00", "0.00", "0.90", "/",
                                               "0.45", "+1.8", "/", "+0.0"]
  own = k3_exchange.own_success_lines(df)
  assert own[1].split() == ["toy_c", "csub", "0.500", "nan", "nan"]


def test_a_prompt_outside_the_trio_is_one_line(tmp_path):
  _write(tmp_path)
  with pytest.raises(SystemExit, match="^4 logged prompts are not the trio's RL prompts$"):
    k3_exchange.exchange_rows(tmp_path, {"q": "cadd"})
