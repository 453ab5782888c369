"""A prefill chunk's attention over a KV cache, reading only the key blocks it can see.

A chunk of C queries sits at cache slots [start, start + C) (``start`` traced: the
pool prefills chunk after chunk into one cache window). Query t sees slot s when

.. math::
    s \\le \\mathrm{start} + t \\quad\\text{and}\\quad \\mathrm{kv\\_mask}[b, s],

so every key past ``start + C`` is in its causal future. The window holds the
prompt region and the response slots behind it (prompt + max new tokens), and a
prefill's queries see the prompt region only: dense attention over the whole
window (`graft_jax.models.layers.Attention._cached`) reads and scores S slots per
query where at most ``start + C`` are ever visible.

This walks key blocks j = 0 .. ceil((start + C) / block) - 1, a traced trip count,
with FlashAttention's online softmax (arXiv 2205.14135), per query and head,

.. math::
    m' = \\max(m, \\max_s x_s),\\quad l' = e^{m - m'} l + \\sum_s e^{x_s - m'},\\quad
    a' = e^{m - m'} a + \\sum_s e^{x_s - m'} v_s,\\quad o = a / l ,

x_s = c q . k_s with c = H^(-1/2): products of the compute dtype's operands (bf16
on a GPU), scores, softmax and sums in float32 (`graft_jax.backends.einsum_f32`).
A query that sees no key (a left pad) outputs 0. No gradient: a sampler's prefill is forward only.
Pure JAX, so the same program runs on every backend: on a GPU XLA fuses each
block's two products and its softmax, and the work follows the prompt, not the
window.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from graft_jax import backends
from graft_jax.models.attention import MASK_VALUE

# Key blocks are the largest power of two <= the layer's attention block that
# divides the window; below this the walk's loop overhead outweighs what it skips.
MIN_BLOCK = 16


def key_block(window: int, block: int) -> int:
  """The walk's key block for a window of ``window`` slots: the largest power of two
  <= ``block`` dividing it, or 0 where that is below `MIN_BLOCK` (attend densely)."""
  bs = 1 << (max(1, int(block)).bit_length() - 1)
  while bs >= MIN_BLOCK and window % bs:
    bs //= 2
  return bs if bs >= MIN_BLOCK and bs < window else 0


def blocks_seen(start, chunk: int, block: int):
  """Key blocks a chunk of ``chunk`` queries at slot ``start`` reads: those meeting
  [0, start + chunk)."""
  return (start + chunk + block - 1) // block


def chunk_attention(q_BxCxKxGxH, k_BxKxHxS, v_BxKxSxH, kv_mask_BxS, start, *, block: int):
  """Attention of the queries at slots [start, start + C) over the cache's slots
  [0, start + C) in key blocks of ``block`` (S a multiple of it).

  Returns (out_BxCxKxGxH in the queries' dtype, key blocks read)."""
  b, c, kh, g, h = q_BxCxKxGxH.shape
  s = k_BxKxHxS.shape[-1]
  if s % block:
    raise ValueError(f"chunk_attention: the window ({s} slots) is not whole blocks of {block}")
  scale = h ** -0.5
  q_BxKxGxCxH = q_BxCxKxGxH.transpose(0, 2, 3, 1, 4)
  q_slot_C = start + jnp.arange(c)
  mask_BxS = kv_mask_BxS.astype(bool)

  def one_block(j, carry):
    m, l, acc = carry
    k_j = jax.lax.dynamic_slice_in_dim(k_BxKxHxS, j * block, block, axis=3)
    v_j = jax.lax.dynamic_slice_in_dim(v_BxKxSxH, j * block, block, axis=2)
    real_Bxbs = jax.lax.dynamic_slice_in_dim(mask_BxS, j * block, block, axis=1)
    k_slot = j * block + jnp.arange(block)
    seen_BxCxbs = (k_slot[None, :] <= q_slot_C[:, None])[None] & real_Bxbs[:, None, :]
    seen = seen_BxCxbs[:, None, None]
    x = backends.einsum_f32("bkgch,bkhs->bkgcs", q_BxKxGxCxH, k_j.astype(q_BxKxGxCxH.dtype))
    x = x * scale
    x = jnp.where(seen, x, MASK_VALUE)
    m_new = jnp.maximum(m, x.max(axis=-1))
    p = jnp.where(seen, jnp.exp(x - m_new[..., None]), 0.0)
    corr = jnp.exp(m - m_new)
    pv = backends.einsum_f32("bkgcs,bksh->bkgch", p.astype(q_BxKxGxCxH.dtype),
                             v_j.astype(q_BxKxGxCxH.dtype))
    return m_new, corr * l + p.sum(axis=-1), corr[..., None] * acc + pv

  init = (jnp.full((b, kh, g, c), MASK_VALUE, jnp.float32),
          jnp.zeros((b, kh, g, c), jnp.float32), jnp.zeros((b, kh, g, c, h), jnp.float32))
  count = jnp.minimum(blocks_seen(start, c, block), s // block)
  _, l, acc = jax.lax.fori_loop(0, count, one_block, init)
  out = jnp.where((l > 0)[..., None], acc / jnp.where(l > 0, l, 1.0)[..., None], 0.0)
  return out.transpose(0, 3, 1, 2, 4).astype(q_BxCxKxGxH.dtype), count
