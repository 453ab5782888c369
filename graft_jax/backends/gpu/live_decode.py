"""Decode attention that reads only the KV blocks of each row's live span (Pallas).

A decode step's query of row b attends to the cache slots [start_b, end_b)
(a left-padded prompt and the response so far). XLA's formulation reads the
whole window of every row, prompt bucket + new-token bucket slots, whatever
the row's length; this kernel loops over the blocks of ``block_k`` slots that
meet the span only, with an online softmax across them, so a step's KV reads
follow the live tokens. It takes the cache in the layouts the model keeps
(keys K x H x S, values K x S x H per row), so a block is one contiguous
slice of each and nothing is transposed per step. One program per (row, kv
head) is the design of `jax.experimental.pallas.ops.gpu.decode_attention`,
whose kernel wants keys as S x H.

Each program also writes how many blocks it read, the count a test checks
(in interpret mode on a CPU).

The kernel is Triton's (its compiler parameters select it): without them JAX
lowers a GPU kernel through Mosaic GPU, which takes no batched grid, and this
one runs under ``jax.vmap`` (kv heads, rows, the slot pool's rows). Triton
loads and stores only arrays of a power-of-two size, so the padded query rows
are a power of two; a block is one of head_dim x ``block_k`` slots, whatever the
window's length.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

# Triton's dot needs at least 16 rows: a kv head's G query heads are padded to it (or
# to the next power of two above it).
_MIN_ROWS = 16
# JAX's own GPU decode attention kernel's settings (`pallas.ops.gpu.decode_attention`).
_TRITON = pltriton.CompilerParams(num_warps=4, num_stages=2)


def _kernel(q_ref, k_ref, v_ref, start_ref, end_ref, o_ref, blocks_ref, *, block_k: int,
            scale: float):
  g, h = q_ref.shape
  q_GxH = q_ref[...].astype(jnp.float32) * scale
  start, end = start_ref[()], end_ref[()]
  first, last = start // block_k, pl.cdiv(end, block_k)

  def body(j, carry):
    acc_GxH, m_G, l_G = carry
    span = pl.ds(j * block_k, block_k)
    k_HxK = k_ref[:, span].astype(jnp.float32)
    v_KxH = v_ref[span, :].astype(jnp.float32)
    s_GxK = jnp.dot(q_GxH, k_HxK)
    slot_K = j * block_k + jnp.arange(block_k)
    s_GxK = jnp.where(((slot_K >= start) & (slot_K < end))[None, :], s_GxK, -jnp.inf)
    m_new_G = jnp.maximum(m_G, s_GxK.max(axis=1))
    p_GxK = jnp.exp(s_GxK - m_new_G[:, None])
    keep_G = jnp.exp(m_G - m_new_G)
    return (acc_GxH * keep_G[:, None] + jnp.dot(p_GxK, v_KxH), m_new_G,
            l_G * keep_G + p_GxK.sum(axis=1))

  init = (jnp.zeros((g, h), jnp.float32), jnp.full((g,), -jnp.inf, jnp.float32),
          jnp.zeros((g,), jnp.float32))
  acc_GxH, _, l_G = jax.lax.fori_loop(first, last, body, init)
  o_ref[...] = (acc_GxH / l_G[:, None]).astype(o_ref.dtype)
  blocks_ref[()] = last - first


def _one_head(q_GxH, k_HxS, v_SxH, start, end, *, block_k: int, scale: float, interpret: bool):
  g, h = q_GxH.shape
  s = k_HxS.shape[1]
  return pl.pallas_call(
      functools.partial(_kernel, block_k=block_k, scale=scale),
      grid=(1,),
      in_specs=[pl.BlockSpec((g, h), lambda i: (0, 0)), pl.BlockSpec((h, s), lambda i: (0, 0)),
                pl.BlockSpec((s, h), lambda i: (0, 0)), pl.BlockSpec((), lambda i: ()),
                pl.BlockSpec((), lambda i: ())],
      out_specs=[pl.BlockSpec((g, h), lambda i: (0, 0)), pl.BlockSpec((), lambda i: ())],
      out_shape=[jax.ShapeDtypeStruct((g, h), q_GxH.dtype),
                 jax.ShapeDtypeStruct((), jnp.int32)],
      compiler_params=_TRITON,
      interpret=interpret,
  )(q_GxH, k_HxS, v_SxH, start, end)


def decode_attention(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B, *, scale: float,
                     block_k: int = 64, interpret: bool = False):
  """Each row's query over its cache slots [start_B, end_B) (end > start), reading only
  the blocks of ``block_k`` slots that meet them. S must be a multiple of ``block_k``.
  Returns (out_BxKxGxH, blocks_BxK: the blocks each (row, kv head) read)."""
  b, _, g, _ = q_BxKxGxH.shape
  s = k_BxKxHxS.shape[-1]
  if s % block_k:
    raise ValueError(f"live decode attention: {s} cache slots are not a multiple of "
                     f"block_k={block_k}")
  rows = g if interpret else max(_MIN_ROWS, 1 << (g - 1).bit_length())
  q = jnp.pad(q_BxKxGxH, ((0, 0), (0, 0), (0, rows - g), (0, 0)))
  head = functools.partial(_one_head, block_k=block_k, scale=scale, interpret=interpret)
  per_row = jax.vmap(head, in_axes=(0, 0, 0, None, None))  # over the kv heads
  out, blocks = jax.vmap(per_row)(q, k_BxKxHxS, v_BxKxSxH, start_B.astype(jnp.int32),
                                  end_B.astype(jnp.int32))
  return out[:, :, :g], blocks
