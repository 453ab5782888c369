"""Decoder building blocks: RMSNorm, RoPE (default/linear/llama3), GQA attention, SwiGLU.

Weights are einsum operands named by their axes (D model, N query heads,
K kv heads, H head dim, F mlp). Each carries `logical_axes` metadata that
`graft_jax.sharding` turns into mesh placements.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax import backends
from graft_jax.models.attention import MASK_VALUE, attention, resolve_impl
from graft_jax.models.chunk_attention import chunk_attention, key_block
from graft_jax.models.matmul import linear


def param(rngs: nnx.Rngs, shape, axes, dtype, *, init="normal", std=0.02) -> nnx.Param:
  """An `nnx.Param` with logical axis names as metadata."""
  if init == "ones":
    value = jnp.ones(shape, dtype)
  else:
    value = (std * jax.random.normal(rngs.params(), shape)).astype(dtype)
  return nnx.Param(value, logical_axes=tuple(axes))


class RMSNorm(nnx.Module):
  """x / rms(x) * scale, normalised in fp32 like transformers."""

  def __init__(self, dim: int, eps: float, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
    self.scale_D = param(rngs, (dim,), ("norm",), param_dtype, init="ones")
    self.eps = eps

  def __call__(self, x):
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return self.scale_D[...].astype(x.dtype) * normed.astype(x.dtype)


def rope_inv_freq(head_dim: int, *, theta: float, rope_type: str, factor: float,
                  low_freq_factor: float, high_freq_factor: float,
                  original_max_positions: int) -> np.ndarray:
  """Inverse frequencies (head_dim // 2,) as transformers computes them, in fp32."""
  exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim
  inv_freq = (1.0 / (np.float32(theta) ** exponent)).astype(np.float32)
  if rope_type == "linear":
    return (inv_freq / np.float32(factor)).astype(np.float32)
  if rope_type != "llama3":
    return inv_freq
  # Llama 3.1 scaling: long wavelengths are divided by `factor`, short ones kept,
  # and the band between is interpolated smoothly.
  low_freq_wavelen = original_max_positions / low_freq_factor
  high_freq_wavelen = original_max_positions / high_freq_factor
  wavelen = 2 * math.pi / inv_freq
  scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
  smooth = (original_max_positions / wavelen - low_freq_factor) / (
      high_freq_factor - low_freq_factor)
  smoothed = (1 - smooth) * scaled / factor + smooth * scaled
  medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
  return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_cos_sin(positions_BxT, inv_freq_H2, num_positions: int):
  """cos and sin of the rotation angles position x inv_freq, (B, T, H/2) each.

  The angle is the float32 product, as transformers forms it. They are taken
  from a table over positions [0, num_positions) instead of being computed in
  place: XLA's CPU fusion would evaluate the cos and sin again for every head
  that reads them, in every layer (a tenth of the sampler's time), while a
  gather stays a fusion of its own, shared by the layers. Positions outside
  the table give NaN.
  """
  angle_PxH2 = jnp.arange(num_positions, dtype=jnp.float32)[:, None] * inv_freq_H2
  take = lambda table: jnp.take(table, positions_BxT, axis=0, mode="fill", fill_value=jnp.nan)
  return take(jnp.cos(angle_PxH2)), take(jnp.sin(angle_PxH2))


def rotate_half(x_BxTxNxH, cos_BxTxH2, sin_BxTxH2):
  """Rotate-half RoPE (transformers layout: element i pairs with i + H/2):
  x cos + (-x2, x1) sin, with each angle's cos and sin on both halves."""
  half = x_BxTxNxH.shape[-1] // 2
  cos = jnp.concatenate([cos_BxTxH2, cos_BxTxH2], axis=-1)[:, :, None, :].astype(x_BxTxNxH.dtype)
  sin = jnp.concatenate([sin_BxTxH2, sin_BxTxH2], axis=-1)[:, :, None, :].astype(x_BxTxNxH.dtype)
  rotated = jnp.concatenate([-x_BxTxNxH[..., half:], x_BxTxNxH[..., :half]], axis=-1)
  return x_BxTxNxH * cos + rotated * sin


def apply_rope(x_BxTxNxH, positions_BxT, inv_freq_H2, num_positions: int):
  """`rotate_half` by the angles of `positions_BxT`, each in [0, num_positions)."""
  return rotate_half(x_BxTxNxH, *rope_cos_sin(positions_BxT, inv_freq_H2, num_positions))


class Attention(nnx.Module):
  """Grouped-query attention with optional per-head q/k RMSNorm and a KV cache."""

  def __init__(self, cfg, use_rope: bool, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
    d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    self.q_DxNxH = param(rngs, (d, n, h), ("embed", "q_heads", "head_dim"), param_dtype)
    self.k_DxKxH = param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), param_dtype)
    self.v_DxKxH = param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), param_dtype)
    self.o_NxHxD = param(rngs, (n, h, d), ("q_heads", "head_dim", "embed"), param_dtype)
    if cfg.qk_norm:
      self.q_norm = RMSNorm(h, cfg.rms_norm_eps, rngs=rngs, param_dtype=param_dtype)
      self.k_norm = RMSNorm(h, cfg.rms_norm_eps, rngs=rngs, param_dtype=param_dtype)
    else:
      self.q_norm = self.k_norm = None
    self.cfg = cfg
    self.use_rope = bool(use_rope)
    # How the uncached and prefill attention runs (`Decoder.set_memory_options`).
    self.attention_impl, self.attention_block = "auto", 512
    # How a decode step (one query per row) attends (`Decoder.set_decode_attention`).
    self.decode_attention = "auto"

  def __call__(self, x_BxTxD, positions_BxT, kv_mask_BxS, cache=None, cache_index=None):
    """Attends over this call's keys, or over `cache` after writing them at `cache_index`.

    Query t sits at slot `cache_index + t` (0 without a cache) and sees the
    slots s <= its own with `kv_mask_BxS[b, s]`. Returns (out_BxTxD,
    new_cache); `cache` is `(k_BxKxHxS, v_BxKxSxH)` or None. RoPE positions lie
    in [0, S), S the width of `kv_mask_BxS` (outside it the rotation is NaN).
    """
    dt = x_BxTxD.dtype
    q_BxTxNxH = linear(x_BxTxD, self.q_DxNxH[...].astype(dt))
    k_BxTxKxH = linear(x_BxTxD, self.k_DxKxH[...].astype(dt))
    v_BxTxKxH = linear(x_BxTxD, self.v_DxKxH[...].astype(dt))
    if self.q_norm is not None:
      q_BxTxNxH, k_BxTxKxH = self.q_norm(q_BxTxNxH), self.k_norm(k_BxTxKxH)
    if self.use_rope:
      # A trace-time constant: computed from the (static, hashable) config.
      inv_freq = jnp.asarray(rope_inv_freq(self.cfg.head_dim, **self.cfg.rope_kwargs))
      # Positions lie below the key slots' count (T without a cache, S with one).
      cos_sin = rope_cos_sin(positions_BxT, inv_freq, kv_mask_BxS.shape[1])
      q_BxTxNxH = rotate_half(q_BxTxNxH, *cos_sin)
      k_BxTxKxH = rotate_half(k_BxTxKxH, *cos_sin)
    b, t, n, h = q_BxTxNxH.shape
    kv = self.cfg.num_kv_heads
    # Query head n = k * g + j shares kv head k (transformers' repeat_kv order).
    q_BxTxKxGxH = q_BxTxNxH.reshape(b, t, kv, n // kv, h)
    # A prefill from slot 0 (a Python 0, not a traced slot) needs only its own
    # keys: every later slot is in the causal future of all its queries.
    fresh = cache is None or (t > 1 and isinstance(cache_index, int) and cache_index == 0)
    # A decode step on the CPU kernel writes its key and value into the cache itself.
    in_kernel = cache is not None and t == 1 and self._decode_kernel(q_BxTxKxGxH, cache)
    if cache is not None and not in_kernel:
      # The cache keeps keys as K x H x S and values as K x S x H per row: the
      # layouts the two attention products read without a transpose, so a
      # decode step writes one slot instead of copying the whole cache.
      k_cache, v_cache = cache
      k_BxKxHxS = jax.lax.dynamic_update_slice(
          k_cache, k_BxTxKxH.transpose(0, 2, 3, 1).astype(k_cache.dtype), (0, 0, 0, cache_index))
      v_BxKxSxH = jax.lax.dynamic_update_slice(
          v_cache, v_BxTxKxH.transpose(0, 2, 1, 3).astype(v_cache.dtype), (0, 0, cache_index, 0))
      cache = (k_BxKxHxS, v_BxKxSxH)
    if in_kernel:
      out_BxKxGxH, k_BxKxHxS, v_BxKxSxH = backends.decode_attention(
          q_BxTxKxGxH[:, 0], *cache, k_BxTxKxH[:, 0], v_BxTxKxH[:, 0], cache_index,
          kv_mask_BxS.astype(bool) & (jnp.arange(kv_mask_BxS.shape[1]) <= cache_index)[None],
          scale=h ** -0.5)
      out_BxTxKxGxH, cache = out_BxKxGxH[:, None], (k_BxKxHxS, v_BxKxSxH)
    elif cache is not None and t == 1 and self._live_block(kv_mask_BxS):
      # Only the KV blocks of each row's live span [first masked slot, this slot]
      # are read; the sampler's masks are that span (left-padded prompts, then the
      # response; a finished row sees its current slot alone).
      out_BxKxGxH, _ = backends.live_decode_attention(
          q_BxTxKxGxH[:, 0], *cache, jnp.argmax(kv_mask_BxS, axis=1),
          jnp.broadcast_to(jnp.asarray(cache_index) + 1, (b,)), scale=h ** -0.5,
          block_k=self._live_block(kv_mask_BxS))
      out_BxTxKxGxH = out_BxKxGxH[:, None]
    elif fresh and (cache is None or self._prefill_impl(q_BxTxKxGxH) != "dense"):
      out_BxTxKxGxH = attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxS[:, :t],
                                impl=self._prefill_impl(q_BxTxKxGxH), block=self.attention_block)
    elif cache is not None and t > 1 and (walk := self._chunk_block(q_BxTxKxGxH, kv_mask_BxS)):
      # A prefill chunk at a traced slot: only the key blocks up to its last query.
      out_BxTxKxGxH, _ = chunk_attention(q_BxTxKxGxH, *cache, kv_mask_BxS, cache_index,
                                         block=walk)
    else:
      out_BxTxKxGxH = self._cached(q_BxTxKxGxH, cache, kv_mask_BxS, cache_index, dt)
    out_BxTxNxH = out_BxTxKxGxH.reshape(b, t, n, h)
    return linear(out_BxTxNxH, self.o_NxHxD[...].astype(dt), in_dims=2), cache

  def _prefill_impl(self, q_BxTxKxGxH) -> str:
    """The attention implementation of an uncached pass or a prefill (trace time)."""
    return resolve_impl(self.attention_impl, dtype=q_BxTxKxGxH.dtype,
                        head_dim=q_BxTxKxGxH.shape[-1], length=q_BxTxKxGxH.shape[1],
                        block=self.attention_block)

  def _chunk_block(self, q_BxTxKxGxH, kv_mask_BxS) -> int:
    """The key block a prefill chunk over a cache walks (`graft_jax.models.chunk_attention`),
    0 where it attends densely over the whole window (`_cached`): where the attention
    implementation for a row of the window's length is 'dense' ('auto' on a CPU up to
    one attention block), or the window has no power-of-two block of >= 16 slots."""
    s = kv_mask_BxS.shape[1]
    impl = resolve_impl(self.attention_impl, dtype=q_BxTxKxGxH.dtype,
                        head_dim=q_BxTxKxGxH.shape[-1], length=s, block=self.attention_block)
    return 0 if impl == "dense" else key_block(s, self.attention_block)

  def _decode_kernel(self, q_BxTxKxGxH, cache) -> bool:
    """Whether a decode step (one query per row) writes its key and value and
    attends in the CPU kernel (`graft_jax.backends.decode_attention`): where
    `decode_attention` is 'kernel', or 'auto' and the kernel applies (the CPU
    backend on an x86 host with AVX-512 or AVX2, f32, head_dim 32 / 64 / 128 /
    256). Otherwise, and for 'xla', the cache is written with
    ``dynamic_update_slice`` and `_cached` attends."""
    if self.decode_attention in ("xla", "live"):
      return False
    why_not = backends.decode_attention_reason(q_BxTxKxGxH[:, 0], *cache)
    if why_not is not None and self.decode_attention == "kernel":
      raise ValueError(f"decode_attention='kernel', but the CPU decode kernel {why_not}")
    return why_not is None

  def _live_block(self, kv_mask_BxS) -> int:
    """The live-span kernel's KV block (`graft_jax.backends.live_decode_attention`) for a
    decode step under 'live' (Pallas's interpret mode off its GPU or TPU, for checks), 0
    where XLA attends. It takes a boolean mask over a window of whole kernel blocks
    (`graft_jax.backends.live_decode_granule`: 16 slots, 128 on a TPU)."""
    if self.decode_attention != "live":
      return 0
    s = kv_mask_BxS.shape[1]
    block = backends.live_decode_block(s)
    if not block or not jnp.issubdtype(kv_mask_BxS.dtype, jnp.bool_):
      raise ValueError(f"decode_attention='live' needs a boolean mask over a multiple of "
                       f"{backends.live_decode_granule()} cache slots; got {kv_mask_BxS.dtype} "
                       f"over {s}")
    return block

  def _cached(self, q_BxTxKxGxH, cache, kv_mask_BxS, cache_index, dt):
    """Dense attention of queries at slots cache_index.. over the whole cache
    (XLA's formulation, and the reference of the other cached paths: a decode step
    may run in the CPU kernel or the live-span kernel, a prefill chunk in the
    block walk, `_chunk_block`)."""
    b, t, _, _, h = q_BxTxKxGxH.shape
    k_BxKxHxS, v_BxKxSxH = cache[0].astype(dt), cache[1].astype(dt)
    s = kv_mask_BxS.shape[1]
    causal_TxS = jnp.arange(s)[None, :] <= (cache_index + jnp.arange(t))[:, None]
    mask_BxTxS = causal_TxS[None] & kv_mask_BxS.astype(bool)[:, None, :]
    if t == 1:
      q_BxKxGxH = q_BxTxKxGxH[:, 0]
      # One query per row (a decode step): products of 2 x 64 by 64 x S per
      # (row, kv head) run faster as a fused multiply-and-sum than as dots.
      q_BxKxGxHx1 = q_BxKxGxH[..., None].astype(jnp.float32)
      scores = (q_BxKxGxHx1 * k_BxKxHxS[:, :, None]).sum(axis=3)[:, :, :, None]
      probs_BxKxGxS = self._softmax(scores, mask_BxTxS, h, dt)[:, :, :, 0]
      out_BxKxGxH = (probs_BxKxGxS[..., None] * v_BxKxSxH[:, :, None]).sum(axis=3)
      return out_BxKxGxH[:, None]
    scores = backends.einsum_f32("btkgh,bkhs->bkgts", q_BxTxKxGxH, k_BxKxHxS)
    probs = self._softmax(scores, mask_BxTxS, h, dt)
    return jnp.einsum("bkgts,bksh->btkgh", probs, v_BxKxSxH)

  @staticmethod
  def _softmax(scores_BxKxGxTxS, mask_BxTxS, head_dim: int, dt):
    scores = jnp.where(mask_BxTxS[:, None, None], scores_BxKxGxTxS * (head_dim ** -0.5),
                       MASK_VALUE)
    return jax.nn.softmax(scores, axis=-1).astype(dt)


class MLP(nnx.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""

  def __init__(self, cfg, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
    d, f = cfg.hidden_size, cfg.intermediate_size
    self.gate_DxF = param(rngs, (d, f), ("embed", "mlp"), param_dtype)
    self.up_DxF = param(rngs, (d, f), ("embed", "mlp"), param_dtype)
    self.down_FxD = param(rngs, (f, d), ("mlp", "embed"), param_dtype)

  def __call__(self, x_BxTxD):
    dt = x_BxTxD.dtype
    gate_BxTxF = linear(x_BxTxD, self.gate_DxF[...].astype(dt))
    up_BxTxF = linear(x_BxTxD, self.up_DxF[...].astype(dt))
    return linear(jax.nn.silu(gate_BxTxF) * up_BxTxF, self.down_FxD[...].astype(dt))
