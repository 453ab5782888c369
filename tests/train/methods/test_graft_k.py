"""GRAFT across K models: the K = 2 path against the frozen pair path, and a hand-worked K = 3 step.

K = 3 (n = 4): k_A = [0, 0, 1, 2], k_B = [3, 0, 0, 0], k_C = [1, 2, 0, 4]. Chosen
sources (largest mixed peer count, ties to the lower index): A: q0 <- B (3 > 1),
q1 <- C; B: q1 <- C, q2 <- A, q3 <- A (C's q3 is all-pass); C: q2 <- A. Balancing
per pair: {A, B}: m = min(1, 2) = 1, so A keeps q0 and B keeps q3 (k_A 2 > 1);
{A, C}: m = min(1, 1) = 1; {B, C}: m = min(1, 0) = 0, so B takes nothing from C.
Result: A takes q0 from B and q1 from C; B takes q3 from A; C takes q2 from A.
"""

import dataclasses

import numpy as np
import pytest

from graft_jax.train import methods, peer_rows
from tests.core import reference
from tests.train.methods import helpers, pair_graft_frozen

N, G = helpers.N, helpers.G
R_A = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]]
R_B = [[1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
R_C = [[1, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
TEXTS_C = ["1", "2b", "ca", "db", "a3", "c", "d1", "ab", "b", "3c", "2", "dd", "a2", "cb", "1d", "b2"]
S_B_Q0 = np.array([1.3, 0.9, 0.7, 1.0])  # s of B's q0 responses under A
S_C_Q1 = np.array([0.85, 0.5, 1.1, 0.95])  # s of C's q1 responses under A


def _lbar(policy, q, texts):
  prompt = policy.prompt_ids(helpers.problems()[q].problem)
  return np.array([helpers.logp_numpy(policy, prompt, policy.encode_response(t, True)).mean()
                   for t in texts])


@pytest.fixture(scope="module")
def three():
  cfg = helpers.config("graft", three=True)
  pols = helpers.policies3(cfg)
  a = pols["toy_a"]
  gen_b = np.full(G * N, -2.0, np.float32)
  gen_b[0:4] = _lbar(a, 0, helpers.TEXTS[0:4]) - np.log(S_B_Q0)
  gen_c = np.full(G * N, -2.0, np.float32)
  gen_c[4:8] = _lbar(a, 1, TEXTS_C[4:8]) - np.log(S_C_Q1)
  rolls = {"toy_a": helpers.rollout(a, R_A),
           "toy_b": helpers.rollout(pols["toy_b"], R_B, gen_mean_B=gen_b),
           "toy_c": helpers.rollout(pols["toy_c"], R_C, gen_mean_B=gen_c, texts=TEXTS_C)}
  method = methods.make(cfg)
  return cfg, pols, rolls, method, method.build_rows(pols, rolls, method.peers(rolls, [], 0), None)


def test_k3_sources_by_hand(three):
  _, _, rolls, method, _ = three
  got = method.receives(rolls, method.peers(rolls, [], 0))
  assert got == {"toy_a": ["toy_b", "toy_c", None, None], "toy_b": [None, None, None, "toy_a"],
                 "toy_c": [None, None, "toy_a", None]}


def test_k3_receiver_rows_come_from_two_peers(three):
  _, pols, rolls, _, out = three
  a, rows = pols["toy_a"], out["toy_a"][0]
  assert rows.grafted == [True] * 8 + [False] * 8 and rows.group == sorted(rows.group)
  for i, (q, texts, r_src, s) in enumerate([(0, helpers.TEXTS[0:4], R_B, S_B_Q0),
                                            (1, TEXTS_C[4:8], R_C, S_C_Q1)]):
    adv = reference.grpo_adv(np.array(r_src, np.float64))[q]
    prompt = rolls["toy_a"].prompt_ids[q]
    for j in range(N):
      r = 4 * i + j
      want_ids = a.encode_response(texts[j], True)
      assert rows.response_ids[r] == want_ids and rows.prompt_ids[r] == prompt
      assert rows.adv[r] == pytest.approx(adv[j], rel=1e-6, abs=1e-7)
      np.testing.assert_allclose(rows.old_logp[r], helpers.logp_numpy(a, prompt, want_ids),
                                 atol=1e-4)
    np.testing.assert_allclose(rows.weight[4 * i:4 * i + 4],
                               np.where(s > 0.8, np.minimum(s, 1.0), 0.0), rtol=1e-4)
    assert rows.keep[4 * i:4 * i + 4] == list(s > 0.8)
  for r in range(8, 16):  # A's own q2, q3
    assert rows.response_ids[r] == rolls["toy_a"].response_ids[r] and rows.weight[r] == 1.0
  # B takes A's q3 with A's advantages; C takes A's q2.
  adv_a = reference.grpo_adv(np.array(R_A, np.float64))
  for recv, q in (("toy_b", 3), ("toy_c", 2)):
    rows = out[recv][0]
    assert [rows.grafted[r] for r in range(16)] == [b // N == q for b in range(16)]
    assert rows.response_ids[q * N:(q + 1) * N] == [
        pols[recv].encode_response(t, True) for t in helpers.TEXTS[q * N:(q + 1) * N]]
    np.testing.assert_allclose(rows.adv[q * N:(q + 1) * N], adv_a[q], atol=1e-6)


def test_k3_statistics_per_directed_pair(three):
  _, _, rolls, method, out = three
  m_a = out["toy_a"][1].metrics()
  assert {k: m_a[k] for k in ("complementarity", "candidates", "grafted_groups",
                              "peer_offered", "admitted")} == dict(
      complementarity=1.0, candidates=2, grafted_groups=2, peer_offered=8, admitted=6)
  from_b, from_c = m_a["from"]["toy_b"], m_a["from"]["toy_c"]
  assert {k: from_b[k] for k in ("complementarity", "candidates", "chosen", "grafted_groups",
                                 "peer_offered", "admitted")} == dict(
      complementarity=0.5, candidates=1, chosen=1, grafted_groups=1, peer_offered=4, admitted=3)
  assert {k: from_c[k] for k in ("complementarity", "candidates", "chosen", "grafted_groups",
                                 "peer_offered", "admitted")} == dict(
      complementarity=1.0, candidates=2, chosen=1, grafted_groups=1, peer_offered=4, admitted=3)
  for stats, s in ((from_b, S_B_Q0), (from_c, S_C_Q1)):
    for p in (10, 50, 90):
      assert stats[f"s_p{p}"] == pytest.approx(np.percentile(s, p), rel=1e-4)
  assert m_a["s_p50"] == pytest.approx(np.median(np.concatenate([S_B_Q0, S_C_Q1])), rel=1e-4)
  # B chose C on q1 but the pair {B, C} balances to m = 0.
  from_c_to_b = out["toy_b"][1].metrics()["from"]["toy_c"]
  assert (from_c_to_b["chosen"], from_c_to_b["grafted_groups"]) == (1, 0)
  assert method.step_metrics(out) == {"m": {"toy_a/toy_b": 1, "toy_a/toy_c": 1,
                                            "toy_b/toy_c": 0}}
  # Each source's peer log records what its receivers did: A's q2 went to C, q3 to B.
  assert rolls["toy_a"].peer_gate["offered"].tolist() == [b // N in (2, 3) for b in range(16)]
  assert rolls["toy_b"].peer_gate["offered"].tolist() == [b // N == 0 for b in range(16)]
  np.testing.assert_allclose(rolls["toy_c"].peer_gate["s"][4:8], S_C_Q1, rtol=1e-4)


def test_a_group_offered_to_two_receivers_keeps_both_records():
  """A fails q0 (B mixed) and q1 (C mixed); B and C both fail q2, where A is mixed. Each
  pair balances to m = 1, so A's q2 group goes to B and to C: A's peer log keeps both."""
  r_a = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]]
  r_b = [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
  r_c = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
  cfg = helpers.config("graft", three=True)
  pols = helpers.policies3(cfg)
  texts = helpers.TEXTS[8:12]
  s_b = np.array([1.3, 0.9, 0.7, 1.0])  # s of A's q2 responses under B, set through gen
  gen_a = np.full(G * N, -2.0, np.float32)
  gen_a[8:12] = _lbar(pols["toy_b"], 2, texts) - np.log(s_b)
  s_c = np.exp(_lbar(pols["toy_c"], 2, texts) - gen_a[8:12])  # and under C, as it falls
  rolls = {"toy_a": helpers.rollout(pols["toy_a"], r_a, gen_mean_B=gen_a),
           "toy_b": helpers.rollout(pols["toy_b"], r_b),
           "toy_c": helpers.rollout(pols["toy_c"], r_c, texts=TEXTS_C)}
  method = methods.make(cfg)
  peers = method.peers(rolls, [], 0)
  assert method.receives(rolls, peers) == {"toy_a": ["toy_b", "toy_c", None, None],
                                           "toy_b": [None, None, "toy_a", None],
                                           "toy_c": [None, None, "toy_a", None]}
  method.build_rows(pols, rolls, peers, None)
  gate = rolls["toy_a"].peer_gate
  assert gate["receivers"][:8] == [[]] * 8 and gate["receivers"][12:] == [[]] * 4
  for j in range(N):
    by_b, by_c = gate["receivers"][8 + j]
    for rec, name, s in ((by_b, "toy_b", s_b[j]), (by_c, "toy_c", s_c[j])):
      assert rec["receiver"] == name and rec["s"] == pytest.approx(s, rel=1e-4)
      assert rec["admitted"] == (s > 0.8)
      assert rec["weight"] == pytest.approx(min(s, 1.0) if s > 0.8 else 0.0, rel=1e-4)
  # The scalar columns keep the first receiver's record (B's).
  np.testing.assert_allclose(gate["s"][8:12], s_b, rtol=1e-4)
  assert gate["offered"].tolist() == [8 <= b < 12 for b in range(G * N)]


def test_one_scoring_call_per_receiver(monkeypatch):
  cfg = helpers.config("graft", three=True)
  pols = helpers.policies3(cfg)
  rolls = {"toy_a": helpers.rollout(pols["toy_a"], R_A),
           "toy_b": helpers.rollout(pols["toy_b"], R_B),
           "toy_c": helpers.rollout(pols["toy_c"], R_C, texts=TEXTS_C)}
  calls = []
  real = peer_rows.score_rows
  by_vocab = {p.model.cfg.vocab_size: name for name, p in pols.items()}  # distinct per model
  monkeypatch.setattr(peer_rows, "score_rows", lambda model, prompts, *a, **kw: (
      calls.append((by_vocab[model.cfg.vocab_size], len(prompts))), real(model, prompts, *a, **kw))[1])
  method = methods.make(cfg)
  method.build_rows(pols, rolls, method.peers(rolls, [], 0), None)
  # A's 8 rows from two peers in one call; B and C one call of 4 rows each.
  assert calls == [("toy_a", 8), ("toy_b", 4), ("toy_c", 4)]


@pytest.mark.parametrize("fields", [
    {}, {"graft.advantages": "pooled", "graft.transfer": "success_only"},
    {"graft.gate": "off", "graft.balance": False}])
def test_k2_equals_the_frozen_pair_path(fields):
  """Rows, weights, old log-probs, gate records and statistics at K = 2 are today's."""
  r_a = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
  r_b = [[1, 0, 1, 0], [1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
  # B's stored log-probs on q0 and q1 put s under A at 1.3, 0.95, 0.85, 0.5 (some admitted).
  a = helpers.policies(helpers.config("graft"))["toy_a"]
  gen_b = np.full(G * N, -2.0, np.float32)
  for q in (0, 1):
    gen_b[q * N:(q + 1) * N] = _lbar(a, q, helpers.TEXTS[q * N:(q + 1) * N]) - np.log(
        [1.3, 0.95, 0.85, 0.5])
  cfg, pols, rolls, method, out = helpers.build("graft", r_a=r_a, r_b=r_b, gen_mean_b=gen_b,
                                                **fields)
  new_gates = {name: roll.peer_gate for name, roll in rolls.items()}
  receives = pair_graft_frozen.pair_receives(rolls, cfg)
  assert sum(int(x.sum()) for x in receives.values()) > 0  # something is grafted
  assert out["toy_a"][1].admitted > 0  # and admitted
  for recv, src in (("toy_a", "toy_b"), ("toy_b", "toy_a")):
    rows, stats, gate = pair_graft_frozen.pair_graft_rows(pols[recv], rolls[recv], rolls[src],
                                                          receives[recv], cfg)
    got_rows, got_stats = out[recv]
    for f in dataclasses.fields(rows):
      want, got = getattr(rows, f.name), getattr(got_rows, f.name)
      if f.name in ("old_logp", "ref_logp"):
        assert [None if x is None else x.tolist() for x in want] == [
            None if x is None else x.tolist() for x in got], f.name
      else:
        assert want == got, f.name
    assert got_stats.metrics() == pytest.approx(stats.metrics(), nan_ok=True)
    for k, v in gate.items():
      np.testing.assert_array_equal(new_gates[src][k], v)
  assert method.step_metrics(out) == {"m": min(out[n][1].candidates for n in out)}


def test_grpo_trains_three_models_alone_with_pair_statistics(three):
  _, pols, rolls, _, _ = three
  method = methods.make(helpers.config("grpo", three=True))
  out = method.build_rows(pols, rolls, method.peers(rolls, [], 0), None)
  for name, roll in rolls.items():
    assert out[name][0].response_ids == roll.response_ids and not any(out[name][0].grafted)
  # A fails q0, q1; B solved q0, C solved q0 and q1 (both mixed on them).
  assert out["toy_a"][1].metrics() == {
      "complementarity": 1.0, "candidates": 2,
      "from": {"toy_b": {"complementarity": 0.5, "candidates": 1},
               "toy_c": {"complementarity": 1.0, "candidates": 2}}}
