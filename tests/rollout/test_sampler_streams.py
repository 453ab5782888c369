"""The JAX sampler's calls side by side (`streams`): each call runs on its own thread,
the output is bit for bit that of the same calls one after another, a shape compiles
once, and the calls in flight never hold more KV cache than the budget's one call."""

import threading

import jax
import numpy as np
import pytest
from flax import nnx

from graft_jax import backends
from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.rollout import jax_engine
from graft_jax.rollout.kv_budget import call_plan, kv_bytes_per_prompt
from graft_jax.rollout.sampler import generate_padded
from graft_jax.sharding.mesh import make_mesh

CFG = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=32, intermediate_size=48,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                  tie_word_embeddings=True)
EOS, PAD = 2, 0
# Eleven prompts (bucketed to 16), 2 samples each, prompt bucket 16, new-token bucket 16.
PROMPTS = [[3 + i, 5, 7 + (i % 4)] + [9] * (i % 5) for i in range(11)]
N = 2
PER_PROMPT = kv_bytes_per_prompt(CFG, n=N, slots=32, itemsize=4)
PARAMS = SamplingParams(max_new_tokens=12, temperature=1.0, seed=3)


class _Recorder:
  """Wraps `generate_padded` as the engine calls it: the threads it ran on, and the
  most calls that were inside it at once. A call counts as inside from its entry;
  after its program it stays until a second call is in too, or 0.5 s has passed:
  calls side by side always overlap (the other thread need only have entered),
  and calls in turn never do."""

  def __init__(self):
    self.cond, self.inside, self.most, self.threads = threading.Condition(), 0, 0, set()

  def __call__(self, *args, **kwargs):
    with self.cond:
      self.inside += 1
      self.most = max(self.most, self.inside)
      self.threads.add(threading.get_ident())
      self.cond.notify_all()
    out = generate_padded(*args, **kwargs)
    with self.cond:
      self.cond.wait_for(lambda: self.inside >= 2, timeout=0.5)
      self.inside -= 1
    return out


def _engine(**kw):
  model = init_model(CFG, rngs=nnx.Rngs(5))
  return JaxSamplerEngine(model, eos_ids=EOS, pad_id=PAD, min_stream_rows=4, **kw)


def _run(monkeypatch, prompts=PROMPTS, **kw):
  recorder = _Recorder()
  monkeypatch.setattr(jax_engine, "generate_padded", recorder)
  out = _engine(**kw).generate(prompts, N, PARAMS)
  return out, recorder


def _same(a, b):
  for field in ("tokens_BxL", "mask_BxL", "logp_BxL", "finished_B", "truncated_B",
                "prompt_index_B"):
    np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def test_streams_run_side_by_side_and_equal_the_same_calls_in_turn(monkeypatch):
  # 4 prompts a call: 3 calls hold real prompts (the fourth would be only filler).
  in_turn, rec1 = _run(monkeypatch, streams=1, max_kv_bytes=4 * PER_PROMPT)
  assert rec1.most == 1 and len(rec1.threads) == 1
  before = generate_padded._cache_size()
  side, rec4 = _run(monkeypatch, streams=4)
  _same(side, in_turn)
  # The first call of a new shape runs alone (one compilation), the other two at once.
  assert generate_padded._cache_size() - before == 0  # the 4-prompt program was reused
  assert rec4.most == 2 and len(rec4.threads) >= 2
  again, rec = _run(monkeypatch, streams=4)
  _same(again, side)
  assert len(set(map(tuple, side.tokens_BxL.tolist()))) > 1  # the rows really differ


def test_a_new_shapes_first_call_runs_alone_then_the_rest_side_by_side(monkeypatch):
  generate_padded.clear_cache()  # a new shape, whatever ran before
  engine = _engine(streams=4, min_new_bucket=32)
  recorder = _Recorder()
  monkeypatch.setattr(jax_engine, "generate_padded", recorder)
  engine.generate(PROMPTS, N, PARAMS)
  assert generate_padded._cache_size() == 1
  assert recorder.most == 2


def test_calls_in_flight_hold_no_more_than_the_budgets_one_call(monkeypatch):
  # The budget fits 5 prompts: one call of 4 without streams; with 4 streams calls of
  # 2 prompts (16 / 4 would be 4, the budget's own chunk is 4): 2 of them at once.
  _, rec = _run(monkeypatch, streams=8, max_kv_bytes=5 * PER_PROMPT)
  assert rec.most == 2
  # A budget of one prompt: calls of one prompt, one at a time.
  _, rec = _run(monkeypatch, PROMPTS[:3], streams=4, max_kv_bytes=PER_PROMPT)
  assert rec.most == 1 and len(rec.threads) == 1


def test_calls_keep_min_stream_rows(monkeypatch):
  # 11 prompts x 2 = a bucket of 32 rows: at most 32 // 16 = 2 calls of 16 rows.
  model = init_model(CFG, rngs=nnx.Rngs(5))
  engine = JaxSamplerEngine(model, eos_ids=EOS, pad_id=PAD, streams=4, min_stream_rows=16)
  calls = []
  monkeypatch.setattr(jax_engine, "generate_padded",
                      lambda *a, **k: calls.append(a[2].shape) or generate_padded(*a, **k))
  engine.generate(PROMPTS, N, PARAMS)
  assert calls == [(8, 16), (8, 16)]


def test_call_plan_with_streams_by_hand():
  assert call_plan(11, 100, 0, streams=4) == (16, 4)
  assert call_plan(11, 100, 0, streams=3) == (16, 4)  # 16 // 3 = 5, down to a power of two
  assert call_plan(11, 100, 0, streams=32) == (16, 1)
  assert call_plan(11, 100, 250, streams=4) == (16, 2)  # the budget's 2 is under 16 // 4
  assert call_plan(11, 100, 0, streams=1) == (16, 16)


def test_streams_must_be_positive():
  with pytest.raises(ValueError, match="streams must be >= 1"):
    _engine(streams=0)


def test_a_mesh_keeps_one_call_at_a_time(monkeypatch):
  # A sharded call spreads its rows over the mesh; here a one-device mesh.
  mesh = make_mesh(devices=jax.devices()[:1])
  _, rec = _run(monkeypatch, streams=4, mesh=mesh)
  assert rec.most == 1 and len(rec.threads) == 1


def test_default_streams_on_a_cpu():
  assert jax.default_backend() == "cpu"
  assert backends.sampler_streams() == 4
  assert _engine().streams == 4
