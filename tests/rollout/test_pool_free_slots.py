"""A slot without a request (finished, or never admitted) still runs in every decode step
of the pool: through the live-span kernel (Pallas's interpret mode on a CPU) it reads one
KV block, not its window, its attention is finite, and the live rows draw what the static
sampler draws."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax import backends
from graft_jax.models import init_model
from graft_jax.rollout import ContinuousSamplerEngine, JaxSamplerEngine, SamplingParams
from tests.models.test_decode_kernel import CFG

# 37 tokens: the call's window is their 64-slot bucket + 16 new slots, 5 blocks of 16; the
# prompt, left-padded to 48 slots (three 16-token chunks), spans slots 11..47.
PROMPT = [5 + i % 40 for i in range(37)]
SLOTS, MAX_PROMPT, BLOCK = 3, 64, 16
BUDGETS = (1, 4)  # r0 ends after its first token, r1 after its fourth


def _counted(monkeypatch):
  """Records, in call order, each row's (start, end, blocks read, output finite) of every
  live-span kernel call."""
  records, kernel = [], backends.live_decode_attention

  def counted(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B, **kw):
    out_BxKxGxH, blocks_BxK = kernel(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B, **kw)
    jax.debug.callback(lambda *row: records.append(tuple(np.asarray(x) for x in row)),
                       start_B, end_B, blocks_BxK, jnp.isfinite(out_BxKxGxH).all(), ordered=True)
    return out_BxKxGxH, blocks_BxK

  monkeypatch.setattr(backends, "live_decode_attention", counted)
  return records


def test_free_and_never_admitted_slots_read_one_block_and_stay_finite(monkeypatch):
  records = _counted(monkeypatch)
  model = init_model(CFG, rngs=nnx.Rngs(3))
  params = SamplingParams(max_new_tokens=max(BUDGETS), temperature=1.0, seed=4)
  engine = ContinuousSamplerEngine(model, eos_ids=-1, pad_id=0, slots=SLOTS,
                                   max_prompt_len=MAX_PROMPT, shrinks=0, decode_attention="live")
  pool = engine.generate([PROMPT], 2, params, budgets=list(BUDGETS))
  steps = int(engine.last_metrics["decode_steps"])
  assert steps == max(BUDGETS)
  # One record per step, layer and slot, in that order (vmap runs the rows in turn).
  assert len(records) == steps * CFG.num_layers * SLOTS
  start, end, blocks, finite = (np.array([r[i] for r in records]).reshape(
      steps, CFG.num_layers, SLOTS, -1) for i in range(4))
  assert finite.all()
  assert (blocks == blocks[..., :1]).all()  # every kv head reads the same blocks
  reads = blocks[..., 0]
  # Slot 0 holds r0 at step 0, then is free; slot 1 holds r1 throughout; slot 2 never
  # takes a request. A live row spans its prompt and its response so far: [11, 49 + t),
  # four blocks.
  live_at = [(0, 0)] + [(t, 1) for t in range(steps)]
  for t, slot in live_at:
    assert (start[t, :, slot, 0] == 11).all() and (end[t, :, slot, 0] == 49 + t).all()
    assert (reads[t, :, slot] == 4).all()
  assert (reads[1:, :, 0] == 1).all()  # finished: one block, not slots 11..79 (5)
  assert (reads[:, :, 2] == 1).all()  # never admitted: one block, not the window (5)
  assert engine.last_metrics["idle_kv_bytes_per_step"] > 0  # one slot each, counted
  # The live rows are the static sampler's (XLA's attention, a batch of rows).
  model.set_decode_attention("xla")
  static = JaxSamplerEngine(model, eos_ids=[-1], pad_id=0).generate([PROMPT], 2, params)
  assert pool.lengths_B.tolist() == list(BUDGETS)
  assert pool.response_ids(0) == static.response_ids(0)[:1]
  assert pool.response_ids(1) == static.response_ids(1)
  assert np.isfinite(pool.logp_BxL).all()
  np.testing.assert_allclose(pool.logp_BxL[1], static.logp_BxL[1], rtol=1e-5, atol=1e-5)
