"""Decode attention that reads only the KV blocks of each row's live span (Pallas, TPU).

The TPU counterpart of `graft_jax.backends.gpu.live_decode`, over the same
cache layouts (keys K x H x S and values K x S x H per row, so nothing is
transposed per step) and the same span: row b's query attends to the cache
slots [start_b, end_b).

A TPU pipeline fetches a block for every grid step, so a KV-block axis in the
grid would walk every row's whole window. Instead the grid is over rows only;
the cache stays in HBM (``memory_space=ANY``) and each program copies the
blocks that meet its span, all kv heads at once, into a two-deep VMEM buffer:
block i + 1 is in flight while block i is scored, with an online softmax
across them (the pattern of JAX's TPU paged attention, whose page table this
cache does not have: a row's blocks are consecutive). The number of copies a
row issued is written out beside the attention, the count a test checks in
Pallas's TPU interpret mode on a CPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# A VMEM block's last dimension is a multiple of the 128 lanes.
LANES = 128


def _kernel(start_ref, end_ref, q_ref, k_hbm, v_hbm, o_ref, blocks_ref, k_buf, v_buf, sems, *,
            block_k: int, scale: float):
  kv, g, h = q_ref.shape
  b = pl.program_id(0)
  start, end = start_ref[b], end_ref[b]
  # Spans are non-negative: truncating division (`//` lowers through a sign).
  first = jax.lax.div(start, block_k)
  n = jax.lax.div(end + block_k - 1, block_k) - first

  def copies(i, slot):
    at = pl.multiple_of((first + i) * block_k, block_k)
    return (pltpu.make_async_copy(k_hbm.at[b, :, :, pl.ds(at, block_k)], k_buf.at[slot],
                                  sems.at[0, slot]),
            pltpu.make_async_copy(v_hbm.at[b, :, pl.ds(at, block_k), :], v_buf.at[slot],
                                  sems.at[1, slot]))

  for c in copies(0, 0):
    c.start()

  def body(i, carry):
    slot = jax.lax.rem(i, 2)
    for c in copies(i, slot):
      c.wait()

    @pl.when(i + 1 < n)
    def _prefetch():
      for c in copies(i + 1, 1 - slot):
        c.start()

    at = (first + i) * block_k
    slot_GxK = at + jax.lax.broadcasted_iota(jnp.int32, (g, block_k), 1)
    live_GxK = (slot_GxK >= start) & (slot_GxK < end)
    out = []
    for head in range(kv):  # a few heads; each is one (G x H) @ (H x block) product
      acc_GxH, m_Gx1, l_Gx1 = carry[head]
      s_GxK = jnp.dot(q_ref[head], k_buf[slot, head], preferred_element_type=jnp.float32)
      s_GxK = jnp.where(live_GxK, s_GxK * scale, -jnp.inf)
      m_new_Gx1 = jnp.maximum(m_Gx1, s_GxK.max(axis=1, keepdims=True))
      p_GxK = jnp.exp(s_GxK - m_new_Gx1)
      keep_Gx1 = jnp.exp(m_Gx1 - m_new_Gx1)
      pv_GxH = jnp.dot(p_GxK.astype(v_buf.dtype), v_buf[slot, head],
                       preferred_element_type=jnp.float32)
      out.append((acc_GxH * keep_Gx1 + pv_GxH, m_new_Gx1,
                  l_Gx1 * keep_Gx1 + p_GxK.sum(axis=1, keepdims=True)))
    return tuple(out)

  init = tuple((jnp.zeros((g, h), jnp.float32), jnp.full((g, 1), -jnp.inf, jnp.float32),
                jnp.zeros((g, 1), jnp.float32)) for _ in range(kv))
  final = jax.lax.fori_loop(0, n, body, init)
  for head, (acc_GxH, _, l_Gx1) in enumerate(final):
    o_ref[head] = (acc_GxH / l_Gx1).astype(o_ref.dtype)
  blocks_ref[...] = jnp.full(blocks_ref.shape, n, jnp.int32)


def decode_attention(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B, *, scale: float,
                     block_k: int = 2 * LANES, interpret: bool = False):
  """Each row's query over its cache slots [start_B, end_B) (end > start), copying only
  the blocks of ``block_k`` slots that meet them out of HBM. ``block_k`` is a multiple
  of 128 and S a multiple of it. Returns (out_BxKxGxH, blocks_BxK: the blocks each
  (row, kv head) read). ``interpret`` runs Pallas's TPU interpreter (on a CPU).

  Under ``jax.vmap`` (the slot pool runs its rows one at a time) the mapped rows join
  the call's rows: one kernel launch, where Pallas's own batching rule for a kernel
  with scalar prefetch would launch it once per row in a loop."""
  s = k_BxKxHxS.shape[-1]
  if block_k % LANES or s % block_k:
    raise ValueError(f"TPU live decode attention: block_k={block_k} must be a multiple of "
                     f"{LANES} dividing the {s} cache slots")
  rows = jax.custom_batching.custom_vmap(
      functools.partial(_call, scale=scale, block_k=block_k, interpret=interpret))

  @rows.def_vmap
  def _joined(axis_size, in_batched, *operands):
    operands = [x if batched else jnp.broadcast_to(x, (axis_size, *x.shape))
                for x, batched in zip(operands, in_batched)]
    out, blocks = rows(*(x.reshape(-1, *x.shape[2:]) for x in operands))
    return (out.reshape(axis_size, -1, *out.shape[1:]),
            blocks.reshape(axis_size, -1, *blocks.shape[1:])), (True, True)

  return rows(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B.astype(jnp.int32),
              end_B.astype(jnp.int32))


def _call(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B, *, scale: float, block_k: int,
          interpret: bool):
  b, kv, g, h = q_BxKxGxH.shape
  row = lambda i, *_: (i, 0, 0, 0)
  out_BxKxGxH, blocks_Bx1xL = pl.pallas_call(
      functools.partial(_kernel, block_k=block_k, scale=scale),
      grid_spec=pltpu.PrefetchScalarGridSpec(
          num_scalar_prefetch=2,
          grid=(b,),
          in_specs=[pl.BlockSpec((None, kv, g, h), row),
                    pl.BlockSpec(memory_space=pl.ANY),
                    pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=[pl.BlockSpec((None, kv, g, h), row),
                     pl.BlockSpec((None, 1, LANES), lambda i, *_: (i, 0, 0))],
          scratch_shapes=[pltpu.VMEM((2, kv, h, block_k), k_BxKxHxS.dtype),
                          pltpu.VMEM((2, kv, block_k, h), v_BxKxSxH.dtype),
                          pltpu.SemaphoreType.DMA((2, 2))]),
      out_shape=[jax.ShapeDtypeStruct((b, kv, g, h), q_BxKxGxH.dtype),
                 jax.ShapeDtypeStruct((b, 1, LANES), jnp.int32)],
      compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
      interpret=pltpu.InterpretParams() if interpret else False,
  )(start_B, end_B, q_BxKxGxH, k_BxKxHxS, v_BxKxSxH)
  return out_BxKxGxH, jnp.broadcast_to(blocks_Bx1xL[:, :1, 0], (b, kv))
