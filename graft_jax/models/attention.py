"""Causal self-attention over a padded batch: dense, or blocked (flash-style) in bounded memory.

Query t of a row attends to keys s <= t whose ``kv_mask_BxS[b, s]`` is True
(left or right padding). With scale c = H^(-1/2),

.. math::
    o_t = \\sum_{s \\in V(t)} \\frac{e^{c\\, q_t \\cdot k_s}}{\\sum_{s' \\in V(t)}
          e^{c\\, q_t \\cdot k_{s'}}} v_s ,

and a query that sees no key (a left pad: V(t) empty) outputs 0 in both
implementations, so they agree at every position.

``dense_attention`` forms the B x N x T x T fp32 scores at once; ``fused_attention``
hands right-padded rows to ``jax.nn.dot_product_attention`` (cuDNN's fused kernel on
a GPU, no T x T scores in memory; XLA's dense path elsewhere). ``blocked_attention``
walks query blocks and, inside each, the key blocks it can see (the causal
future is skipped), keeping a running max m, normaliser l and output
accumulator (the online softmax of FlashAttention, arXiv 2205.14135):

.. math::
    m' = \\max(m, \\max_s x_s),\\quad l' = e^{m - m'} l + \\sum_s e^{x_s - m'},\\quad
    a' = e^{m - m'} a + \\sum_s e^{x_s - m'} v_s,\\quad o = a / l .

Its gradient is a custom VJP that recomputes each block's probabilities from
the saved log-normaliser L = m + log l (FlashAttention-2's backward):
P = exp(x - L), D_t = dO_t . O_t, dS = P * (dO V^T - D), dQ = c dS K, dK = c dS^T Q,
dV = P^T dO. Forward and backward hold O(T x H) per head plus one block of
scores, never T x T. Queries are grouped by kv head (GQA): q_BxTxKxGxH.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

# Large but finite, so a max over fully masked scores stays finite.
MASK_VALUE = -1e30
ATTENTION_IMPLS = ("dense", "blocked", "fused")


def visible_BxT(kv_mask_BxS, t: int):
  """Whether query t (slot t) sees any key: some s <= t with kv_mask[b, s]."""
  return jnp.cumsum(kv_mask_BxS[:, :t].astype(jnp.int32), axis=1) > 0


def dense_attention(q_BxTxKxGxH, k_BxSxKxH, v_BxSxKxH, kv_mask_BxS):
  """Causal attention with the full scores (fastest at small T)."""
  t, h, dt = q_BxTxKxGxH.shape[1], q_BxTxKxGxH.shape[-1], q_BxTxKxGxH.dtype
  s = k_BxSxKxH.shape[1]
  causal_TxS = jnp.arange(s)[None, :] <= jnp.arange(t)[:, None]
  mask_BxTxS = causal_TxS[None] & kv_mask_BxS.astype(bool)[:, None, :]
  scores = jnp.einsum("btkgh,bskh->bkgts", q_BxTxKxGxH, k_BxSxKxH,
                      preferred_element_type=jnp.float32)
  scores = jnp.where(mask_BxTxS[:, None, None], scores * (h ** -0.5), MASK_VALUE)
  probs = jax.nn.softmax(scores, axis=-1).astype(dt)
  out_BxTxKxGxH = jnp.einsum("bkgts,bskh->btkgh", probs, v_BxSxKxH)
  seen = visible_BxT(kv_mask_BxS.astype(bool), t)[:, :, None, None, None]
  return jnp.where(seen, out_BxTxKxGxH, 0).astype(dt)


def blocked_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT, *, block: int = 512):
  """Causal self-attention in query and key blocks of ``block`` positions; same values
  as `dense_attention` (keys and queries share positions 0..T-1)."""
  b, t = q_BxTxKxGxH.shape[:2]
  bs = max(1, min(int(block), t))
  pad = -t % bs
  if pad:
    # Padded keys are masked; padded queries are cut off again below.
    widen = lambda x: jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2))
    q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH = map(widen, (q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH))
    kv_mask_BxT = widen(kv_mask_BxT)
  out = _flash(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT.astype(bool), bs)
  return out[:, :t]


def _block(x, i, bs):
  return jax.lax.dynamic_slice_in_dim(x, i * bs, bs, axis=1)


def _scores(q_i, k_j, mask_i_j, scale):
  """Scaled fp32 scores of a query block against a key block, masked: (x, mask)."""
  x = jnp.einsum("bqkgh,bskh->bkgqs", q_i, k_j, preferred_element_type=jnp.float32) * scale
  return jnp.where(mask_i_j, x, MASK_VALUE)


def _mask(kv_mask_BxT, i, j, bs):
  """B x 1 x 1 x bs x bs: key slot <= query slot, and the key is real."""
  q_slot = i * bs + jnp.arange(bs)
  k_slot = j * bs + jnp.arange(bs)
  causal = k_slot[None, :] <= q_slot[:, None]
  return (causal[None] & _block(kv_mask_BxT, j, bs)[:, None, :])[:, None, None]


def _forward(q, k, v, kv_mask, bs):
  """(out_BxTxKxGxH, lse_BxKxGxT); lse = 0 for a query that sees no key."""
  b, t, kh, g, h = q.shape
  scale = h ** -0.5

  def query_block(i):
    q_i = _block(q, i, bs)

    def key_block(j, carry):
      m, l, acc = carry
      mask = _mask(kv_mask, i, j, bs)
      x = _scores(q_i, _block(k, j, bs), mask, scale)
      m_new = jnp.maximum(m, x.max(axis=-1))
      p = jnp.where(mask, jnp.exp(x - m_new[..., None]), 0.0)
      corr = jnp.exp(m - m_new)
      pv = jnp.einsum("bkgqs,bskh->bkgqh", p.astype(v.dtype), _block(v, j, bs),
                      preferred_element_type=jnp.float32)
      return m_new, corr * l + p.sum(axis=-1), corr[..., None] * acc + pv

    init = (jnp.full((b, kh, g, bs), MASK_VALUE, jnp.float32),
            jnp.zeros((b, kh, g, bs), jnp.float32), jnp.zeros((b, kh, g, bs, h), jnp.float32))
    # Key blocks past this query block's last slot are all in the causal future.
    m, l, acc = jax.lax.fori_loop(0, i + 1, key_block, init)
    seen = l > 0
    out = acc / jnp.where(seen, l, 1.0)[..., None]
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), 0.0)
    return out.transpose(0, 3, 1, 2, 4).astype(q.dtype), lse

  out_NxBxbsxKxGxH, lse_NxBxKxGxbs = jax.lax.map(query_block, jnp.arange(t // bs))
  out = out_NxBxbsxKxGxH.swapaxes(0, 1).reshape(b, t, kh, g, h)
  lse = lse_NxBxKxGxbs.transpose(1, 2, 3, 0, 4).reshape(b, kh, g, t)
  return out, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _flash(q, k, v, kv_mask, bs):
  return _forward(q, k, v, kv_mask, bs)[0]


def _flash_fwd(q, k, v, kv_mask, bs):
  out, lse = _forward(q, k, v, kv_mask, bs)
  return out, (q, k, v, kv_mask, out, lse)


def _flash_bwd(bs, res, dout):
  q, k, v, kv_mask, out, lse = res
  b, t, kh, g, h = q.shape
  scale = h ** -0.5
  # D_t = dO_t . O_t per query and head.
  d_BxKxGxT = jnp.einsum("btkgh,btkgh->bkgt", dout.astype(jnp.float32), out.astype(jnp.float32))

  def query_block(carry, i):
    dk, dv = carry
    q_i, do_i = _block(q, i, bs), _block(dout, i, bs)
    lse_i = jax.lax.dynamic_slice_in_dim(lse, i * bs, bs, axis=3)
    d_i = jax.lax.dynamic_slice_in_dim(d_BxKxGxT, i * bs, bs, axis=3)

    def key_block(j, inner):
      dq_i, dk, dv = inner
      k_j, v_j = _block(k, j, bs), _block(v, j, bs)
      mask = _mask(kv_mask, i, j, bs)
      p = jnp.where(mask, jnp.exp(_scores(q_i, k_j, mask, scale) - lse_i[..., None]), 0.0)
      dv_j = jnp.einsum("bkgqs,bqkgh->bskh", p.astype(do_i.dtype), do_i,
                        preferred_element_type=jnp.float32)
      dp = jnp.einsum("bqkgh,bskh->bkgqs", do_i, v_j, preferred_element_type=jnp.float32)
      ds = (p * (dp - d_i[..., None]) * scale).astype(q.dtype)
      dq_i = dq_i + jnp.einsum("bkgqs,bskh->bqkgh", ds, k_j, preferred_element_type=jnp.float32)
      dk_j = jnp.einsum("bkgqs,bqkgh->bskh", ds, q_i, preferred_element_type=jnp.float32)
      add = lambda acc, x: jax.lax.dynamic_update_slice_in_dim(
          acc, _block(acc, j, bs) + x, j * bs, axis=1)
      return dq_i, add(dk, dk_j), add(dv, dv_j)

    dq_i = jnp.zeros((b, bs, kh, g, h), jnp.float32)
    dq_i, dk, dv = jax.lax.fori_loop(0, i + 1, key_block, (dq_i, dk, dv))
    return (dk, dv), dq_i

  zeros = jnp.zeros(k.shape, jnp.float32)
  (dk, dv), dq_NxBxbsxKxGxH = jax.lax.scan(query_block, (zeros, zeros), jnp.arange(t // bs))
  dq = dq_NxBxbsxKxGxH.swapaxes(0, 1).reshape(q.shape)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


_flash.defvjp(_flash_fwd, _flash_bwd)


def fused_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT):
  """``jax.nn.dot_product_attention``: cuDNN's fused kernel on a GPU where it applies
  (bf16 / fp16), XLA elsewhere. For **right-padded** rows only (each row's mask a
  prefix, as the update's and the scorer's rows are): keys are limited by each row's
  length n_b, ``key_value_seq_lengths``, so query t sees keys s <= min(t, n_b - 1).
  The real positions t < n_b get `dense_attention`'s values; a pad query attends to the
  row's real keys (an all-pad row to its first slot) instead of giving 0, and no loss
  reads it."""
  b, t, kv, g, h = q_BxTxKxGxH.shape
  lengths_B = jnp.maximum(kv_mask_BxT.astype(jnp.int32).sum(axis=1), 1)
  # Query head n = k * G + j shares kv head k: the grouping dot_product_attention uses.
  out_BxTxNxH = jax.nn.dot_product_attention(
      q_BxTxKxGxH.reshape(b, t, kv * g, h), k_BxTxKxH, v_BxTxKxH, is_causal=True,
      key_value_seq_lengths=lengths_B)
  return out_BxTxNxH.reshape(b, t, kv, g, h)


def attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT, *, impl: str = "dense",
              block: int = 512):
  """Causal self-attention by ``impl`` ('dense' | 'blocked' | 'fused', the last for
  right-padded rows only); see the module docstring."""
  if impl == "dense":
    return dense_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT)
  if impl == "blocked":
    return blocked_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT, block=block)
  if impl == "fused":
    return fused_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT)
  raise ValueError(f"attention impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
