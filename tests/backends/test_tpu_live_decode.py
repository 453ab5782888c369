"""The TPU live-span decode attention kernel (Pallas's TPU interpreter on a CPU): float64
NumPy's attention over each row's live slots, the blocks it copied out of HBM counted,
Mosaic's lowering for a TPU, and the slot pool's tokens through it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graft_jax import backends
from graft_jax.backends.tpu import live_decode
from graft_jax.models import init_model
from graft_jax.rollout import ContinuousSamplerEngine, JaxSamplerEngine, SamplingParams
from tests.backends.live_reference import operands, reference
from tests.models.test_decode_kernel import CFG

B, K, G, H, S, BLOCK = 4, 2, 2, 32, 512, 128


def _operands(seed=0, b=B):
  return operands(seed, b, K, G, H, S)


def _attend(q, k, v, start, end, block_k=BLOCK):
  return live_decode.decode_attention(*map(jnp.asarray, (q, k, v, start, end)),
                                      scale=H ** -0.5, block_k=block_k, interpret=True)


def test_copies_only_the_blocks_of_each_rows_live_span():
  q, k, v = _operands()
  # A full window; a prompt left-padded to slot 130 with 127 tokens so far; a finished
  # row attending to its current slot alone; a span ending on a block edge.
  start, end = np.array([0, 130, 300, 128]), np.array([512, 257, 301, 384])
  out, blocks = _attend(q, k, v, start, end)
  # Blocks of 128 slots meeting [0, 512), [130, 257), [300, 301), [128, 384): by hand.
  np.testing.assert_array_equal(np.asarray(blocks), np.repeat([[4], [2], [1], [2]], K, axis=1))
  np.testing.assert_allclose(np.asarray(out), reference(q, k, v, start, end), atol=2e-6)


def test_slots_outside_the_live_blocks_are_never_read():
  """NaN in every block before and past each row's span leaves the output finite and equal;
  scores over the whole window turn NaN on the same cache (row 2's span is the window)."""
  q, k, v = _operands(1)
  start, end = np.array([140, 5, 0, 400]), np.array([300, 17, 512, 401])
  k_nan, v_nan = k.copy(), v.copy()
  for b in range(B):
    outside = np.r_[0:start[b] // BLOCK * BLOCK, -(-end[b] // BLOCK) * BLOCK:S]
    k_nan[b][:, :, outside], v_nan[b][:, outside] = np.nan, np.nan
  out, _ = _attend(q, k_nan, v_nan, start, end, block_k=BLOCK)
  np.testing.assert_allclose(np.asarray(out), reference(q, k, v, start, end), atol=2e-6)
  dense = jnp.einsum("bkgh,bkhs->bkgs", q, k_nan)
  assert np.isnan(np.asarray(dense)[[0, 1, 3]]).any(axis=-1).all()


def test_one_row_at_a_time_under_vmap_is_one_batched_call():
  """The slot pool runs the model one row at a time under ``jax.vmap``: the rows join one
  launch (Pallas's own rule would loop over them in a scan), with the batched results."""
  q, k, v = _operands(2)
  start, end = np.array([256, 0, 17, 255]), np.array([512, 129, 18, 257])
  batched, blocks = _attend(q, k, v, start, end, block_k=256)
  one = lambda *a: live_decode.decode_attention(*(x[None] for x in a), scale=H ** -0.5,
                                                block_k=256, interpret=True)
  operands = tuple(map(jnp.asarray, (q, k, v, start, end)))
  traced = str(jax.make_jaxpr(jax.vmap(one))(*operands))
  assert traced.count("pallas_call[") == 1 and "grid=(4,)" in traced and "scan[" not in traced
  out, row_blocks = jax.vmap(one)(*operands)
  np.testing.assert_array_equal(np.asarray(out[:, 0]), np.asarray(batched))
  np.testing.assert_array_equal(np.asarray(row_blocks[:, 0]), np.asarray(blocks))
  np.testing.assert_array_equal(np.asarray(blocks)[:, 0], [1, 1, 1, 2])


def test_blocks_are_whole_lanes_dividing_the_window():
  q, k, v = _operands()
  for block_k, slots in ((64, S), (BLOCK, 384 + 64)):
    with pytest.raises(ValueError, match="multiple of 128 dividing"):
      live_decode.decode_attention(*map(jnp.asarray, (q, k[..., :slots], v[:, :, :slots])),
                                   jnp.zeros(B, jnp.int32), jnp.ones(B, jnp.int32), scale=1.0,
                                   block_k=block_k)


def test_lowers_to_mosaic_for_a_tpu_in_bf16():
  """Pallas's TPU lowering (Mosaic) of a Qwen3-1.7B-shaped step, run on this CPU: what
  XLA's TPU compiler would take, short of compiling it."""
  kv, g, h, s, b = 8, 2, 128, 4352 + 256, 4
  step = jax.jit(lambda q, k, v, st, en: live_decode.decode_attention(q, k, v, st, en,
                                                                       scale=h ** -0.5))
  bf16 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.bfloat16)
  lowered = step.trace(bf16(b, kv, g, h), bf16(b, kv, h, s), bf16(b, kv, s, h),
                       jax.ShapeDtypeStruct((b,), jnp.int32),
                       jax.ShapeDtypeStruct((b,), jnp.int32)).lower(lowering_platforms=("tpu",))
  assert "tpu_custom_call" in lowered.as_text()


def test_the_backend_door_routes_a_tpu_trace_to_this_kernel():
  assert backends.live_decode_granule() == 16 and backends.live_decode_block(48) == 16
  with backends.traced_for("tpu"):
    assert backends.live_decode_granule() == 128
    assert [backends.live_decode_block(s) for s in (512, 384, 48)] == [256, 128, 0]
    assert not backends.live_decode_by_default()  # traced for a TPU, running on a CPU
    q, k, v = _operands(3)
    start, end = np.array([0, 130, 300, 128]), np.array([512, 257, 301, 384])
    out, blocks = backends.live_decode_attention(*map(jnp.asarray, (q, k, v, start, end)),
                                                 scale=H ** -0.5, block_k=BLOCK)
    np.testing.assert_array_equal(np.asarray(blocks)[:, 0], [4, 2, 1, 2])
    np.testing.assert_allclose(np.asarray(out), reference(q, k, v, start, end), atol=2e-6)


def test_slot_pool_traced_for_a_tpu_samples_what_the_static_sampler_does():
  """The pool's decode steps through this kernel (slots refilled mid-call, windows in
  whole 128-slot blocks): the static sampler's tokens on XLA's attention."""
  prompts, eos = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 30))], tuple(range(2, 40))
  model = init_model(CFG, rngs=nnx.Rngs(3))
  model.set_memory_options(attention="dense")  # splash, 'auto' on a TPU, has no CPU path
  params = SamplingParams(max_new_tokens=20, temperature=1.0, seed=4)
  with backends.traced_for("tpu"):
    engine = ContinuousSamplerEngine(model, eos_ids=eos, pad_id=0, slots=2, prefill_chunk=128,
                                     max_prompt_len=32, decode_attention="live")
    pool = engine.generate(prompts, 2, params)
  assert engine.max_prompt_len + engine.max_new_tokens == 256  # two blocks of 128
  model.set_decode_attention("xla")
  static = JaxSamplerEngine(model, eos_ids=eos, pad_id=0).generate(prompts, 2, params)
  assert len(set(static.lengths_B.tolist())) > 2
  np.testing.assert_array_equal(pool.tokens_BxL, static.tokens_BxL)
  np.testing.assert_allclose(pool.logp_BxL, static.logp_BxL, rtol=1e-5, atol=1e-5)
