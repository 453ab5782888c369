"""The live-span decode attention kernel (Pallas, interpret mode on a CPU): float64
NumPy's attention over each row's live slots, and the KV blocks it read counted."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax import backends
from tests.backends.live_reference import operands, reference

B, K, G, H, S, BLOCK = 4, 2, 2, 16, 128, 16


def _operands(seed=0):
  return operands(seed, B, K, G, H, S)


def test_reads_only_the_blocks_of_each_rows_live_span():
  q, k, v = _operands()
  # A full window; a prompt left-padded to slot 10 with 23 tokens so far; a row that
  # has finished and attends to its current slot alone; a span ending on a block edge.
  start, end = np.array([0, 10, 70, 32]), np.array([128, 33, 71, 64])
  out, blocks = backends.live_decode_attention(*map(jnp.asarray, (q, k, v, start, end)),
                                               scale=H ** -0.5, block_k=BLOCK)
  # Blocks of 16 slots meeting [0, 128), [10, 33), [70, 71), [32, 64): by hand.
  np.testing.assert_array_equal(np.asarray(blocks), np.repeat([[8], [3], [1], [2]], K, axis=1))
  np.testing.assert_allclose(np.asarray(out), reference(q, k, v, start, end), atol=2e-6)


def test_slots_outside_the_span_are_never_read():
  """NaN written past every row's span (and before it) leaves the output finite and equal."""
  q, k, v = _operands(1)
  start, end = np.array([16, 5, 0, 40]), np.array([40, 17, 128, 41])
  k_nan, v_nan = k.copy(), v.copy()
  for b in range(B):
    outside = np.r_[0:start[b] // BLOCK * BLOCK, -(-end[b] // BLOCK) * BLOCK:S]
    k_nan[b][:, :, outside], v_nan[b][:, outside] = np.nan, np.nan
  out, _ = backends.live_decode_attention(*map(jnp.asarray, (q, k_nan, v_nan, start, end)),
                                          scale=H ** -0.5, block_k=BLOCK)
  np.testing.assert_allclose(np.asarray(out), reference(q, k, v, start, end), atol=2e-6)


def test_a_window_off_the_block_size_is_refused():
  q, k, v = _operands()
  with pytest.raises(ValueError, match="block_k"):
    backends.live_decode_attention(*map(jnp.asarray, (q, k[..., :120], v[:, :, :120])),
                                   jnp.zeros(B), jnp.ones(B), scale=1.0, block_k=BLOCK)


def _lowered_for_cuda(b, kv, g, h, s, *, per_row: bool = False):
  """The kernel at these shapes, traced through the backend door for a GPU and lowered
  for CUDA (``jax.export``, nothing compiled); ``per_row``: one row at a time under
  ``jax.vmap``, as the slot pool runs it. Returns the module's text."""
  from jax import export  # pylint: disable=import-outside-toplevel

  def step(q, k, v, start, end):
    return backends.live_decode_attention(q, k, v, start, end, scale=h ** -0.5, block_k=64)[0]

  if per_row:
    one = step
    step = jax.vmap(lambda *a: one(*(x[None] for x in a))[0])
  bf16 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.bfloat16)
  i32 = jax.ShapeDtypeStruct((b,), jnp.int32)
  with backends.traced_for("gpu", lowering=True):
    exported = export.export(jax.jit(step), platforms=["cuda"], disabled_checks=[
        export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(
            bf16(b, kv, g, h), bf16(b, kv, h, s), bf16(b, kv, s, h), i32, i32)
  return exported.mlir_module()


@pytest.mark.parametrize("per_row", [False, True], ids=["batched", "slot_pool"])
def test_lowers_to_triton_for_a_gpu(per_row):
  """A Qwen3-1.7B-shaped step (8 kv heads of 2 queries, head_dim 128) over a window of
  4,608 slots, no power of two: Triton's kernel, under ``jax.vmap`` whether the rows
  come batched or one at a time (Mosaic GPU, JAX's default GPU lowering, takes no
  batched grid)."""
  text = _lowered_for_cuda(4, 8, 2, 128, 4352 + 256, per_row=per_row)
  assert "__gpu$xla.gpu.triton" in text and "mosaic_gpu" not in text


def test_query_rows_pad_to_a_power_of_two_for_triton():
  """Triton loads only arrays of a power-of-two size: 40 query heads per kv head are
  padded to 64 rows, not 48."""
  assert "__gpu$xla.gpu.triton" in _lowered_for_cuda(2, 1, 40, 128, 256)
