"""The decoder-only transformer shared by Qwen3, Llama 3.x and SmolLM3, in Flax NNX.

`Decoder(ids_BxT)` gives fp32 logits for an unpadded batch; padded batches pass
`attn_mask_BxT` (left or right padding both work: positions count real tokens).
Packed rows (several sequences per row) pass `segment_ids_BxT` instead: 1, 2, ...
per sequence, 0 on padding; each sequence's positions start at 0 (RoPE restarts)
and it attends within itself only (`graft_jax.models.attention`).
`forward_cached` runs prefill / decode steps against a static-length KV cache.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from graft_jax.models.attention import ATTENTION_IMPLS, packed_kernel
from graft_jax.models.config import ModelConfig
from graft_jax.models import layer_storage
from graft_jax.models.layer_stack import REMAT_POLICIES, run_blocks, scan_period, scan_stacks
from graft_jax.models.layers import MLP, Attention, RMSNorm, param

KVCache = tuple  # per layer: (k_BxKxHxS, v_BxKxSxH)
DECODE_ATTENTION = ("auto", "xla", "kernel", "live")


class Block(nnx.Module):
  """Pre-norm residual block: attention then SwiGLU."""

  def __init__(self, cfg: ModelConfig, layer: int, *, rngs: nnx.Rngs, param_dtype):
    self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, rngs=rngs,
                              param_dtype=param_dtype)
    self.attn = Attention(cfg, cfg.use_rope_layers[layer], rngs=rngs, param_dtype=param_dtype)
    self.post_attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, rngs=rngs,
                                  param_dtype=param_dtype)
    self.mlp = MLP(cfg, rngs=rngs, param_dtype=param_dtype)

  def __call__(self, x_BxTxD, positions_BxT, kv_mask_BxS, cache=None, cache_index=None):
    attn_BxTxD, cache = self.attn(self.input_norm(x_BxTxD), positions_BxT, kv_mask_BxS,
                                  cache, cache_index)
    h_BxTxD = x_BxTxD + attn_BxTxD
    return h_BxTxD + self.mlp(self.post_attn_norm(h_BxTxD)), cache


class Decoder(nnx.Module):
  """Token ids in, next-token logits out.

  `param_dtype` is the storage (master) dtype; `dtype` the compute dtype
  (defaults to `param_dtype`; e.g. fp32 params with bf16 compute).
  `remat`, `scan_layers` and the attention implementation (see
  `set_memory_options`) change how `hidden` runs the blocks, never what it
  computes. Blocks are `layers[i]` (per layer) or, under `scan_layers`,
  `stacks[j]` (parameters stacked on a layer axis, `layer_storage`); `score_tokens` bounds the tokens per pass of
  `graft_jax.train.row_logprobs.score_rows` and `kv_cache_bytes` the KV cache of
  one `graft_jax.rollout.JaxSamplerEngine` call.
  """

  remat: str = "none"
  scan_layers: bool = False
  score_tokens: int = 0
  kv_cache_bytes: int = 0
  stacks: nnx.List | None = None

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32,
               dtype=None):
    self.cfg = cfg
    self.dtype = jnp.dtype(dtype or param_dtype)
    self.embedding_VxD = param(rngs, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"),
                               param_dtype)
    self.layers = nnx.List([Block(cfg, i, rngs=rngs, param_dtype=param_dtype)
                            for i in range(cfg.num_layers)])
    self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, rngs=rngs,
                              param_dtype=param_dtype)
    self.lm_head_DxV = None if cfg.tie_word_embeddings else param(
        rngs, (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"), param_dtype)

  def __call__(self, ids_BxT, attn_mask_BxT=None, positions_BxT=None, *, segment_ids_BxT=None):
    """fp32 logits_BxTxV; rows may be padded on either side via `attn_mask_BxT`, or
    packed (`segment_ids_BxT`)."""
    return self.logits(self.hidden(ids_BxT, attn_mask_BxT, positions_BxT,
                                   segment_ids_BxT=segment_ids_BxT))

  def hidden(self, ids_BxT, attn_mask_BxT=None, positions_BxT=None, *, segment_ids_BxT=None):
    """The last block's output x_BxTxD (before the final norm): `logits(hidden(...))` is
    `__call__`, and a caller that needs a few positions' logits projects only those.
    With `segment_ids_BxT` (packed rows) `attn_mask_BxT` is not read."""
    b, t = ids_BxT.shape
    if segment_ids_BxT is not None:
      # The blocks' mask is then the int32 segment ids (`graft_jax.models.attention`).
      seg_BxT = jnp.asarray(segment_ids_BxT).astype(jnp.int32)
      if positions_BxT is None:
        positions_BxT = positions_from_segments(seg_BxT)
      return self._run_blocks(self.embed(ids_BxT), positions_BxT, seg_BxT)
    if attn_mask_BxT is None:
      attn_mask_BxT = jnp.ones((b, t), bool)
    attn_mask_BxT = attn_mask_BxT.astype(bool)
    if positions_BxT is None:
      positions_BxT = positions_from_mask(attn_mask_BxT)
    return self._run_blocks(self.embed(ids_BxT), positions_BxT, attn_mask_BxT)

  def _run_blocks(self, x_BxTxD, positions_BxT, kv_mask_BxT):
    if self.stacks is not None:
      return scan_stacks(self.stacks, x_BxTxD, positions_BxT, kv_mask_BxT, remat=self.remat)
    return run_blocks(self.layers, x_BxTxD, positions_BxT, kv_mask_BxT, remat=self.remat)

  def set_memory_options(self, *, remat: str = "none", scan_layers: bool = False,
                         attention: str = "auto", attention_block: int = 512,
                         score_tokens: int = 0, kv_cache_bytes: int = 0) -> None:
    """Remat policy per block ('none' | 'full' | 'dots_saveable' | 'dots_no_batch'),
    whether the blocks run under `jax.lax.scan` (`graft_jax.models.layer_stack`; their
    parameters are then stored stacked on a layer axis, `layer_storage`, and turning
    it off stores them per layer again),
    the attention of the forward pass and the sampler's prefill ('dense' |
    'blocked' in blocks of `attention_block` positions, `graft_jax.models.attention`)
    the scorer's tokens per pass (0: its fixed row chunks) and the sampler's
    KV-cache bytes per call (0: no limit). All are static: they live in the
    graphdef, so a change recompiles."""
    if remat != "none" and remat not in REMAT_POLICIES:
      raise ValueError(f"remat must be 'none' or one of {sorted(REMAT_POLICIES)}, got {remat!r}")
    if attention not in ATTENTION_IMPLS:
      raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {attention!r}")
    if attention_block < 1 or min(score_tokens, kv_cache_bytes) < 0:
      raise ValueError(f"need attention_block >= 1, score_tokens >= 0, kv_cache_bytes >= 0; got "
                       f"{attention_block}, {score_tokens}, {kv_cache_bytes}")
    self.remat, self.scan_layers = remat, bool(scan_layers)
    self.score_tokens, self.kv_cache_bytes = int(score_tokens), int(kv_cache_bytes)
    if self.scan_layers and self.stacks is None:
      period = scan_period([nnx.split(b)[0] for b in self.layers])
      self.stacks, self.layers = layer_storage.stack_blocks(self.layers, period), None
    elif not self.scan_layers and self.stacks is not None:
      self.layers, self.stacks = layer_storage.unstack_blocks(self.stacks), None
    for block in self._blocks():
      block.attn.attention_impl, block.attn.attention_block = attention, int(attention_block)

  def set_decode_attention(self, impl: str) -> None:
    """How a decode step's attention over the KV cache runs: 'auto' (the CPU
    kernel of `graft_jax.backends.cpu.decode_kernel` where it applies, XLA otherwise),
    'xla', 'kernel' (the CPU kernel or an error at trace time), or 'live' (a Pallas
    kernel that reads only each row's live KV blocks, `graft_jax.backends.live_decode_attention`:
    the GPU's or, traced for a TPU, the TPU's; Pallas's interpret mode off that hardware;
    `ContinuousSamplerEngine`'s 'auto' on a GPU or TPU). Static: it lives
    in the graphdef, so a change recompiles. A sampler sharded over several
    devices keeps XLA's (`JaxSamplerEngine`)."""
    if impl not in DECODE_ATTENTION:
      raise ValueError(f"decode attention must be one of {DECODE_ATTENTION}, got {impl!r}")
    for block in self._blocks():
      block.attn.decode_attention = impl

  @property
  def decode_attention(self) -> str:
    return self._blocks()[0].attn.decode_attention

  def packed_attention(self, length: int) -> str:
    """The kernel its packed rows of ``length`` attend in (`attention.packed_kernel`):
    a run records it in its metrics (``<model>/packed_attention``)."""
    attn = self._blocks()[0].attn
    return packed_kernel(attn.attention_impl, dtype=self.dtype, head_dim=self.cfg.head_dim,
                         length=length, block=attn.attention_block)

  def _blocks(self):
    """The blocks as stored: one per layer, or the stacks (`layer_storage`)."""
    return self.layers if self.stacks is None else self.stacks

  def forward_cached(self, ids_BxT, positions_BxT, kv_mask_BxS, cache: KVCache,
                     cache_index, *, last_only: bool = False):
    """Writes this chunk's keys at slots [cache_index, cache_index + T) and attends.

    `kv_mask_BxS` marks cache slots holding real tokens (this chunk's included).
    Returns (logits_BxTxV fp32, new_cache); with `last_only`, logits_Bx1xV of the
    chunk's last position (a prefill needs no more, and a 2048-token prompt's
    full logits would be 2048 x V floats per row).
    """
    x_BxTxD = self.embed(ids_BxT)
    new_cache = []
    for i, layer_cache in enumerate(cache):
      block = self.block(i)
      x_BxTxD, layer_cache = block(x_BxTxD, positions_BxT, kv_mask_BxS.astype(bool),
                                   layer_cache, cache_index)
      new_cache.append(layer_cache)
    if last_only:
      x_BxTxD = x_BxTxD[:, -1:]
    return self.logits(x_BxTxD), tuple(new_cache)

  def init_cache(self, batch: int, max_len: int, dtype=None) -> KVCache:
    """Per layer (k_BxKxHxS, v_BxKxSxH) zeros: the layouts `Attention` reads them in."""
    k, h, dt = self.cfg.num_kv_heads, self.cfg.head_dim, dtype or self.dtype
    return tuple((jnp.zeros((batch, k, h, max_len), dt), jnp.zeros((batch, k, max_len, h), dt))
                 for _ in range(self.cfg.num_layers))

  def block(self, i: int) -> Block:
    """Block i, whichever storage holds it (a stacked one is sliced out)."""
    return self.layers[i] if self.stacks is None else layer_storage.layer_block(self.stacks, i)

  def embed(self, ids_BxT):
    return jnp.take(self.embedding_VxD[...], ids_BxT, axis=0).astype(self.dtype)

  def logits(self, x_BxTxD):
    x_BxTxD = self.final_norm(x_BxTxD)
    if self.lm_head_DxV is None:
      return jnp.einsum("btd,vd->btv", x_BxTxD, self.embedding_VxD[...].astype(self.dtype),
                        preferred_element_type=jnp.float32)
    return jnp.einsum("btd,dv->btv", x_BxTxD, self.lm_head_DxV[...].astype(self.dtype),
                      preferred_element_type=jnp.float32)


def positions_from_mask(mask_BxT):
  """Position of each token among its row's real tokens (pads get 0)."""
  return jnp.maximum(jnp.cumsum(mask_BxT.astype(jnp.int32), axis=1) - 1, 0)


def positions_from_segments(seg_BxT):
  """Position of each token within its segment: t minus the slot where the run of
  equal segment ids holding t starts (a packed row's sequences each start at 0)."""
  t = seg_BxT.shape[1]
  slot_T = jnp.arange(t)
  starts_BxT = jnp.concatenate([jnp.ones_like(seg_BxT[:, :1], bool),
                                seg_BxT[:, 1:] != seg_BxT[:, :-1]], axis=1)
  first_BxT = jax.lax.cummax(jnp.where(starts_BxT, slot_T[None, :], 0), axis=1)
  return (slot_T[None, :] - first_BxT).astype(jnp.int32)


def init_model(cfg: ModelConfig, *, rngs: nnx.Rngs | None = None, param_dtype=jnp.float32,
               dtype=None) -> Decoder:
  """A randomly initialised decoder (normal(0, 0.02) weights, unit norms)."""
  return Decoder(cfg, rngs=rngs or nnx.Rngs(0), param_dtype=param_dtype, dtype=dtype)
