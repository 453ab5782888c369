"""friction_gate's summary lines on hand-made peer rows."""

from benchmarks.toy import friction_gate
from graft_jax.experiments import exchange_view


def _row(text, reward, s, receiver="toy_b"):
  return exchange_view.PeerRow(
      receiver=receiver, prompt="Add 1 and 2.", family="cadd", k_recv=0, k_peer=1,
      selected=True, text=text, reward=reward, adv=0.0, gen_tokens=5, recv_tokens=5,
      lbar_gen=-0.1, lbar_recv=-0.1, s=s, admitted=s > 0.8, roundtrip=True)


def test_splits_correct_bare_answers_from_traces():
  rows = [_row(" \\boxed{3}", 1.0, 0.01), _row(" \\boxed{3}", 1.0, 0.03),
          _row(" \\boxed{4}", 0.0, 0.02),
          _row(" carry up: 1+2+0=3. \\boxed{3}", 1.0, 0.9),
          _row(" carry down: 1+2+0=3. \\boxed{3}", 1.0, 0.7)]
  lines = friction_gate.gate_lines(rows, 0.8)
  assert lines == [
      "receiver toy_b, the peer's correct bare answers: 2, median s 0.020, admitted (s > 0.8) 0%",
      "receiver toy_b, the peer's correct worked traces: 2, median s 0.800, admitted (s > 0.8) 50%",
      "  the peer's samples: 5, bare answers 60.0%, of which correct 66.7%"]
