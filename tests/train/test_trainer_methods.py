"""Every method end to end on two tiny random models with different tokenizers.

The logged counts are checked against a recomputation from the peer logs the
run wrote (rewards -> success counts -> candidates, m, grafted groups), and
the gate's admissions at step 0 against scores computed here with a plain
forward pass of the initial receiver.
"""

import jax
import numpy as np
import pytest

from configs import toy
from graft_jax.config import run_config as config_lib
from graft_jax.outputs import peer_log
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train.trainer import Trainer
from tests.core import reference
from tests.train import tiny_pair

pytestmark = pytest.mark.slow
N, G, STEPS = 4, 8, 2


def make_cfg(method, workdir, **extra):
  cd = toy.get_config(method)
  cd.unlock()
  cd.workdir = str(workdir)
  cd.prompts_per_step, cd.n, cd.num_minibatches, cd.max_response_len = G, N, 2, 8
  cd.hacpo.minibatch_prompts = 4
  cd.logging.progress_bar = cd.logging.tensorboard = False
  cd.optimizer.lr = 1e-3
  cd.checkpoint.every_steps = 1
  for k, v in extra.items():
    node = cd
    *path, last = k.split(".")
    for p in path:
      node = node[p]
    node[last] = v
  return config_lib.from_config_dict(cd)


def train(method, workdir, steps=STEPS, **extra):
  cfg = make_cfg(method, workdir, **extra)
  trainer = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(),
                    reward_fn=tiny_pair.contains_reward)
  trainer.run(steps)
  trainer.close()
  return cfg, {r["step"]: r for r in read_jsonl(workdir / "metrics.jsonl")}


def logged_counts(workdir, name, step):
  table = peer_log.PeerLogReader(workdir / "peer_logs", name).load_step(step).to_pylist()
  ids = list(dict.fromkeys(r["prompt_id"] for r in table))
  return ids, np.array([sum(r["reward"] for r in table if r["prompt_id"] == p) for p in ids])


def mean_logp_numpy(model, prompt, response):
  """Mean log-prob of response tokens by a plain forward pass, in float64."""
  ids = np.array([prompt + response], np.int32)
  logits = np.asarray(model(ids), np.float64)[0]
  logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  lp = [logits[len(prompt) - 1 + t, tok] - logz[len(prompt) - 1 + t] for t, tok in enumerate(response)]
  return float(np.mean(lp)) if lp else float("nan")


@pytest.fixture(scope="module")
def graft_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("graft")
  cfg, metrics = train("graft", workdir)
  return workdir, cfg, metrics


def test_graft_counts_match_the_logs(graft_run):
  workdir, cfg, metrics = graft_run
  for step in range(STEPS):
    ids_a, k_a = logged_counts(workdir, "toy_a", step)
    ids_b, k_b = logged_counts(workdir, "toy_b", step)
    assert ids_a == ids_b
    a_recv, b_recv = reference.exchange(k_a, k_b, N)
    cand_a = sum((k_a == 0) & (k_b >= 1) & (k_b <= N - 1))
    cand_b = sum((k_b == 0) & (k_a >= 1) & (k_a <= N - 1))
    rec = metrics[step]
    assert rec["toy_a/exchange/candidates"] == cand_a
    assert rec["toy_b/exchange/candidates"] == cand_b
    assert rec["m"] == min(cand_a, cand_b)
    assert rec["toy_a/exchange/grafted_groups"] == a_recv.sum()
    assert rec["toy_b/exchange/grafted_groups"] == b_recv.sum()


def test_graft_admissions_match_an_independent_gate_at_step_0(graft_run):
  workdir, cfg, metrics = graft_run
  models = tiny_pair.make_models()
  rows = {name: peer_log.PeerLogReader(workdir / "peer_logs", name).load_step(0).to_pylist()
          for name in ("toy_a", "toy_b")}
  _, k_a = logged_counts(workdir, "toy_a", 0)
  _, k_b = logged_counts(workdir, "toy_b", 0)
  a_recv, b_recv = reference.exchange(k_a, k_b, N)
  for recv, src, key, mask in (("toy_a", "toy_b", "a", a_recv), ("toy_b", "toy_a", "b", b_recv)):
    model, tok = models[key]
    admitted = 0
    for q in np.flatnonzero(mask):
      for r in rows[src][q * N:(q + 1) * N]:
        prompt = tok.encode(r["prompt"], add_special_tokens=False)
        resp = tok.encode(r["response"], add_special_tokens=False) if r["response"] else []
        resp = resp + [tok.eos_token_id] if (r["finished"] and resp) else resp
        s = np.exp(mean_logp_numpy(model, prompt, resp) - np.mean(r["logprobs"]))
        admitted += bool(s > 0.8)
    assert metrics[0][f"{recv}/exchange/admitted"] == admitted


def test_peer_logs_record_what_the_receiver_did(graft_run):
  """Each source row's offered / s / admitted / weight agree with the exchange the logged
  rewards imply, the gate rule applied to the stored s, and the step's logged counts."""
  workdir, cfg, metrics = graft_run
  grafted = 0
  for step in range(STEPS):
    _, k_a = logged_counts(workdir, "toy_a", step)
    _, k_b = logged_counts(workdir, "toy_b", step)
    a_recv, b_recv = reference.exchange(k_a, k_b, N)
    for recv, src, mask in (("toy_a", "toy_b", a_recv), ("toy_b", "toy_a", b_recv)):
      t = peer_log.PeerLogReader(workdir / "peer_logs", src).load_step(step).to_pandas()
      offered = t["offered"].to_numpy()
      np.testing.assert_array_equal(offered, np.repeat(mask.astype(bool), N))
      s = t["s"].to_numpy(np.float64)
      assert np.isnan(s[~offered]).all() and np.isnan(t["weight"].to_numpy()[~offered]).all()
      assert not t["admitted"].to_numpy()[~offered].any()
      s_in = s[offered]
      want_admitted = s_in > cfg.graft.delta
      np.testing.assert_array_equal(t["admitted"].to_numpy()[offered], want_admitted)
      np.testing.assert_allclose(t["weight"].to_numpy()[offered],
                                 np.where(want_admitted, np.minimum(s_in, 1.0), 0.0), rtol=1e-6)
      rec = metrics[step]
      assert rec[f"{recv}/exchange/peer_offered"] == offered.sum()
      assert rec[f"{recv}/exchange/admitted"] == want_admitted.sum()
      if offered.any():
        assert rec[f"{recv}/exchange/s_p50"] == pytest.approx(np.median(s_in), rel=1e-6)
      grafted += offered.sum()
  assert grafted > 0  # the run grafted something, so the checks above were not vacuous


def test_replay_consumes_the_graft_run_logs(graft_run, tmp_path):
  workdir, _, graft_metrics = graft_run
  _, metrics = train("replay", tmp_path, **{"replay.log_dir": str(workdir / "peer_logs")})
  assert metrics[0]["replay_missing"] == 0
  ids_a, k_a = logged_counts(tmp_path, "toy_a", 0)
  _, k_b = logged_counts(workdir, "toy_b", 0)
  a_recv, _ = reference.exchange(k_a, k_b, N, balance=False)
  assert metrics[0]["toy_a/exchange/grafted_groups"] == a_recv.sum()
  # Same seed and prompts: the one-way replay takes every candidate, not just m.
  assert metrics[0]["toy_a/exchange/grafted_groups"] >= graft_metrics[0]["toy_a/exchange/grafted_groups"]


@pytest.mark.parametrize("method", ["grpo", "sgt", "hacpo", "hacpo_graft_prompts"])
def test_baselines_run_and_log(method, tmp_path):
  _, metrics = train(method, tmp_path)
  for step in range(STEPS):
    rec = metrics[step]
    for name in ("toy_a", "toy_b"):
      _, k = logged_counts(tmp_path, name, step)
      assert rec[f"{name}/all_fail"] == pytest.approx(np.mean(k == 0))
      assert np.isfinite(rec[f"{name}/update/loss"])
      assert rec[f"{name}/update/minibatch_updates"] == 2
      assert rec[f"{name}/packed_attention"] == "dense"  # 'auto' on a CPU, short rows
  if method == "sgt":
    _, k_a = logged_counts(tmp_path, "toy_a", 0)
    _, k_b = logged_counts(tmp_path, "toy_b", 0)
    assert metrics[0]["toy_a/exchange/sgt_active"] == np.sum((k_a == 0) & (k_b >= 1))
