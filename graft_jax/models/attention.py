"""Causal self-attention over a padded batch, by the fastest kernel each backend has.

Query t of a row attends to keys s <= t whose ``kv_mask_BxS[b, s]`` is True
(left or right padding). With scale c = H^(-1/2),

.. math::
    o_t = \\sum_{s \\in V(t)} \\frac{e^{c\\, q_t \\cdot k_s}}{\\sum_{s' \\in V(t)}
          e^{c\\, q_t \\cdot k_{s'}}} v_s ,

and a query that sees no key (a left pad: V(t) empty) outputs 0 in both
implementations, so they agree at every position.

A *packed* row holds several sequences one after another. Its mask is then an
integer segment id per position (1, 2, ... per sequence, 0 on padding) instead
of a boolean, and query t sees the keys s <= t of its own segment only, so
each sequence attends as if it were alone in its row. Every implementation
takes both forms; with segment ids each outputs 0 at a padding position.

Implementations (``impl``; `resolve_impl` picks one for 'auto', the default):

- 'dense': XLA, the B x N x T x T fp32 scores at once (fastest at small T, on CPU).
- 'blocked': pure JAX, flash-style, in bounded memory on any backend (below).
- 'cudnn': cuDNN's flash-attention kernel through ``jax.nn.dot_product_attention
  (implementation='cudnn')``, GPU only, bf16 / fp16 inputs, head_dim <= 128.
- 'splash': the Pallas splash-attention kernel, TPU (``interpret=True`` runs its
  numerics on a CPU).

'cudnn' and 'splash' take each row's real tokens as one contiguous span (left or
right padding, as every caller's rows are): the span is rotated to the front of
the row, attended with a causal mask limited to the span's length, and rotated
back. They output 0 at every padded query; 'dense' and 'blocked' output 0 at a
query that sees no key (a left pad) and attend over the row's real keys at a right
pad. No loss reads a padded position, so every implementation gives the same
values wherever one is read. Packed rows (segment ids) run on a GPU in the kernel
`graft_jax.backends.packed_attention_kernel` picks (`packed_gpu_attention`): cuDNN's
packed layout on Hopper or later (`graft_jax.models.packed_attention`: each
sequence alone, no tile across two), elsewhere the Pallas GPU flash kernel, which
masks by segment id and causally in its blocks and so computes every causal tile of
the whole row; on a TPU they run in splash attention with the segment ids as they
are. ``blocked_attention`` walks query blocks and, inside each, the key blocks it
can see (the causal future is skipped), keeping a running max m, normaliser l and
output accumulator (the online softmax of FlashAttention, arXiv 2205.14135):

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
import math

import jax
import jax.numpy as jnp

from graft_jax import backends
from graft_jax.models import packed_attention
from graft_jax.sharding.place import batch_axes

# Large but finite, so a max over fully masked scores stays finite.
MASK_VALUE = -1e30
ATTENTION_IMPLS = ("auto", "dense", "blocked", "cudnn", "splash")
# cuDNN's flash attention: half-precision inputs, head_dim at most 128.
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128
# Splash attention's query / key block; rows are padded up to a multiple of it.
SPLASH_BLOCK = 128
# The Pallas GPU kernel's backward blocks. Its fused backward walks the key blocks of
# dK / dV and the query blocks of dQ on one grid axis, so block_q_dq = block_kv_dkv.
PALLAS_GPU_BWD_BLOCK = 64


def is_segments(kv_mask_BxS) -> bool:
  """Whether a mask holds segment ids (an integer array) rather than real / pad flags."""
  return not jnp.issubdtype(kv_mask_BxS.dtype, jnp.bool_)


def query_key_segments(kv_mask_BxS, t: int):
  """(q_seg_BxT, k_seg_BxS) int32, such that query t sees key s <= t exactly where
  k_seg > 0 and q_seg == k_seg: a boolean mask gives every query segment 1 (it sees
  every real key), segment ids are their own."""
  if is_segments(kv_mask_BxS):
    seg_BxS = kv_mask_BxS.astype(jnp.int32)
    return seg_BxS[:, :t], seg_BxS
  return jnp.ones(kv_mask_BxS[:, :t].shape, jnp.int32), kv_mask_BxS.astype(jnp.int32)


def visible_BxT(kv_mask_BxS, t: int):
  """Whether query t (slot t) sees any key: some s <= t with kv_mask[b, s]."""
  return jnp.cumsum(kv_mask_BxS[:, :t].astype(jnp.int32), axis=1) > 0


def dense_attention(q_BxTxKxGxH, k_BxSxKxH, v_BxSxKxH, kv_mask_BxS):
  """Causal attention with the full scores (fastest at small T)."""
  t, h, dt = q_BxTxKxGxH.shape[1], q_BxTxKxGxH.shape[-1], q_BxTxKxGxH.dtype
  s = k_BxSxKxH.shape[1]
  causal_TxS = jnp.arange(s)[None, :] <= jnp.arange(t)[:, None]
  q_seg_BxT, k_seg_BxS = query_key_segments(kv_mask_BxS, t)
  same_BxTxS = (q_seg_BxT[:, :, None] == k_seg_BxS[:, None, :]) & (k_seg_BxS > 0)[:, None, :]
  mask_BxTxS = causal_TxS[None] & same_BxTxS
  scores = jnp.einsum("btkgh,bskh->bkgts", q_BxTxKxGxH, k_BxSxKxH,
                      preferred_element_type=jnp.float32)
  scores = jnp.where(mask_BxTxS[:, None, None], scores * (h ** -0.5), MASK_VALUE)
  probs = jax.nn.softmax(scores, axis=-1).astype(dt)
  out_BxTxKxGxH = jnp.einsum("bkgts,bskh->btkgh", probs, v_BxSxKxH)
  if is_segments(kv_mask_BxS):
    seen_BxT = q_seg_BxT > 0  # a query of a segment sees itself
  else:
    seen_BxT = visible_BxT(kv_mask_BxS.astype(bool), t)
  return jnp.where(seen_BxT[:, :, None, None, None], out_BxTxKxGxH, 0).astype(dt)


def blocked_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT, *, block: int = 512):
  """Causal self-attention in query and key blocks of ``block`` positions; same values
  as `dense_attention` (keys and queries share positions 0..T-1)."""
  b, t = q_BxTxKxGxH.shape[:2]
  q_seg_BxT, k_seg_BxT = query_key_segments(kv_mask_BxT, t)
  bs = max(1, min(int(block), t))
  pad = -t % bs
  if pad:
    # Padded keys are masked; padded queries are cut off again below.
    widen = lambda x: jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2))
    q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH = map(widen, (q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH))
    q_seg_BxT, k_seg_BxT = widen(q_seg_BxT), widen(k_seg_BxT)
  out = _flash(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, (q_seg_BxT, k_seg_BxT), bs)
  return out[:, :t]


def _block(x, i, bs):
  return jax.lax.dynamic_slice_in_dim(x, i * bs, bs, axis=1)


def _scores(q_i, k_j, mask_i_j, scale):
  """Scaled fp32 scores of a query block against a key block, masked: (x, mask)."""
  x = jnp.einsum("bqkgh,bskh->bkgqs", q_i, k_j, preferred_element_type=jnp.float32) * scale
  return jnp.where(mask_i_j, x, MASK_VALUE)


def _mask(segments, i, j, bs):
  """B x 1 x 1 x bs x bs: key slot <= query slot, the key is real and in the
  query's segment (``segments``: `query_key_segments`)."""
  q_seg_BxT, k_seg_BxT = segments
  q_slot = i * bs + jnp.arange(bs)
  k_slot = j * bs + jnp.arange(bs)
  causal = k_slot[None, :] <= q_slot[:, None]
  q_seg, k_seg = _block(q_seg_BxT, i, bs), _block(k_seg_BxT, j, bs)
  same = (q_seg[:, :, None] == k_seg[:, None, :]) & (k_seg > 0)[:, None, :]
  return (causal[None] & same)[:, None, None]


def _forward(q, k, v, segments, bs):
  """(out_BxTxKxGxH, lse_BxKxGxT); lse = 0 for a query that sees no key."""
  b, t, kh, g, h = q.shape
  scale = h ** -0.5

  def query_block(i):
    q_i = _block(q, i, bs)

    def key_block(j, carry):
      m, l, acc = carry
      mask = _mask(segments, i, j, bs)
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
def _flash(q, k, v, segments, bs):
  return _forward(q, k, v, segments, bs)[0]


def _flash_fwd(q, k, v, segments, bs):
  out, lse = _forward(q, k, v, segments, bs)
  return out, (q, k, v, segments, out, lse)


def _flash_bwd(bs, res, dout):
  q, k, v, segments, out, lse = res
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
      mask = _mask(segments, i, j, bs)
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
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), (None, None)


_flash.defvjp(_flash_fwd, _flash_bwd)


def resolve_impl(impl: str, *, dtype, head_dim: int, length: int, block: int = 512,
                 backend: str | None = None) -> str:
  """The implementation that runs for ``impl`` on ``backend`` (default: the one programs
  are traced for, `graft_jax.backends.platform`).

  'auto' is cuDNN's kernel on a GPU where it applies (else 'blocked', which
  never forms T x T scores either), splash attention on a TPU, and on a CPU
  'dense' up to one attention block of positions and 'blocked' beyond it (the
  dense scores at long T cost more memory than the blocked loop costs time).
  An explicit choice is returned as given.
  """
  if impl not in ATTENTION_IMPLS:
    raise ValueError(f"attention impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
  if impl != "auto":
    return impl
  backend = backend or backends.platform()
  if backend in ("gpu", "cuda", "rocm"):
    return "cudnn" if cudnn_applies(dtype, head_dim) and backend != "rocm" else "blocked"
  if backend == "tpu":
    return "splash"
  return "dense" if length <= block else "blocked"


def packed_kernel(impl: str, *, dtype, head_dim: int, length: int, block: int = 512,
                  backend: str | None = None) -> str:
  """The kernel packed rows (segment ids) of ``length`` attend in under ``impl``: where
  it resolves to 'cudnn', the one `graft_jax.backends.packed_attention_kernel` picks
  ('cudnn_packed' or 'pallas'), elsewhere the resolved implementation itself ('splash',
  'blocked' or 'dense')."""
  chosen = resolve_impl(impl, dtype=dtype, head_dim=head_dim, length=length, block=block,
                        backend=backend)
  return backends.packed_attention_kernel(dtype, head_dim) if chosen == "cudnn" else chosen


def describe_impl(impl: str, *, dtype, head_dim: int, length: int, block: int = 512,
                  backend: str | None = None) -> str:
  """One line for the run's log: what ``impl`` runs as on this backend, and why (with
  'cudnn', also the kernel of packed rows, `describe_packed`)."""
  backend = backend or backends.platform()
  chosen = resolve_impl(impl, dtype=dtype, head_dim=head_dim, length=length, block=block,
                        backend=backend)
  packed = f"; packed rows: {describe_packed(dtype, head_dim)}" if chosen == "cudnn" else ""
  if impl != "auto":
    return f"{chosen} (set by attention_impl){packed}"
  if chosen == "blocked" and backend not in ("cpu",):
    return (f"blocked ('auto' on {backend}: cuDNN's kernel needs bf16/fp16 inputs and "
            f"head_dim <= {CUDNN_MAX_HEAD_DIM}, got {jnp.dtype(dtype).name}, {head_dim})")
  if backend == "cpu":
    return (f"{chosen} ('auto' on cpu: 'dense' up to {block} positions, 'blocked' beyond; "
            f"rows of up to {length})")
  return f"{chosen} ('auto' on {backend}){packed}"


def cudnn_applies(dtype, head_dim: int) -> bool:
  """Whether cuDNN's flash attention takes these inputs."""
  return jnp.dtype(dtype).name in CUDNN_DTYPES and head_dim <= CUDNN_MAX_HEAD_DIM


def _span_B(kv_mask_BxT):
  """(start_B, length_B) of each row's contiguous span of real positions."""
  mask_BxT = kv_mask_BxT.astype(bool)
  length_B = mask_BxT.sum(axis=1).astype(jnp.int32)
  start_B = jnp.where(length_B > 0, jnp.argmax(mask_BxT, axis=1), 0).astype(jnp.int32)
  return start_B, length_B


def _rotate(x_BxTx, shift_B):
  """Row b rotated left by shift_B[b] positions along axis 1."""
  t = x_BxTx.shape[1]
  idx_BxT = (jnp.arange(t)[None, :] + shift_B[:, None]) % t
  idx = idx_BxT.reshape(idx_BxT.shape + (1,) * (x_BxTx.ndim - 2))
  return jnp.take_along_axis(x_BxTx, idx, axis=1)


def _spans_to_front(attend, q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT):
  """Runs ``attend(q, k, v, length_B)`` on rows whose span is rotated to slot 0
  (right-padded), rotates the output back and zeroes the padded queries."""
  t = q_BxTxKxGxH.shape[1]
  start_B, length_B = _span_B(kv_mask_BxT)
  front = lambda x: _rotate(x, start_B)
  out = attend(front(q_BxTxKxGxH), front(k_BxTxKxH), front(v_BxTxKxH), length_B)
  out_BxTxKxGxH = _rotate(out, (t - start_B) % t)
  real = kv_mask_BxT.astype(bool)[:, :, None, None, None]
  return jnp.where(real, out_BxTxKxGxH, 0).astype(q_BxTxKxGxH.dtype)


def _pad_to_block(x_BxTx, tp: int):
  """x widened with zeros along axis 1 to ``tp`` positions."""
  return jnp.pad(x_BxTx, ((0, 0), (0, tp - x_BxTx.shape[1])) + ((0, 0),) * (x_BxTx.ndim - 2))


def per_device_rows(kernel, *operands_BxT):
  """``kernel(*operands_BxT)`` on each device's rows where the mesh in context splits
  rows over its batch axes (``jax.shard_map``), else on them all (inside a
  ``shard_map`` over those axes the rows are already one device's). A Pallas kernel is
  one custom call with no partitioning rule: under a mesh the partitioner would gather
  every row to every device and run the whole batch on each."""
  mesh = jax.sharding.get_abstract_mesh()
  axes = () if mesh.empty else tuple(a for a in batch_axes(mesh) if a not in mesh.manual_axes)
  shards = math.prod(mesh.shape[a] for a in axes)
  if shards == 1 or operands_BxT[0].shape[0] % shards:
    return kernel(*operands_BxT)
  rows = jax.sharding.PartitionSpec(axes)
  return jax.shard_map(kernel, mesh=mesh, in_specs=rows, out_specs=rows,
                       check_vma=False)(*operands_BxT)


def pallas_segment_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, seg_BxT, *,
                             interpret: bool | None = None):
  """Packed rows on a GPU: the Pallas GPU flash kernel (``jax.experimental.pallas.ops.
  gpu.attention.mha``), causal and masked by segment id, rows padded to a multiple of
  `SPLASH_BLOCK` with segment 0. It takes as many kv heads as query heads, so each kv
  head is repeated G times (GQA). Its backward is the kernel's own Triton backward
  (FlashAttention-2's, recomputing each block's probabilities from the saved
  log-normaliser) in blocks of `PALLAS_GPU_BWD_BLOCK`. ``interpret`` (the default off
  a GPU) runs its numerics anywhere. Outputs 0 at padding (segment 0)."""
  from jax.experimental.pallas.ops.gpu import attention as pallas_gpu  # pylint: disable=g-import-not-at-top

  if interpret is None:
    interpret = not (backends.platform() == "gpu" and backends.kernels_native())
  b, t, kv, g, h = q_BxTxKxGxH.shape
  tp = -(-t // SPLASH_BLOCK) * SPLASH_BLOCK
  q_BxTxNxH = _pad_to_block(q_BxTxKxGxH.reshape(b, t, kv * g, h), tp)
  repeat = lambda x: _pad_to_block(jnp.repeat(x, g, axis=2), tp)
  seg_BxTp = _pad_to_block(seg_BxT.astype(jnp.int32), tp)
  bwd = PALLAS_GPU_BWD_BLOCK
  blocks = pallas_gpu.BlockSizes(block_q=SPLASH_BLOCK, block_k=SPLASH_BLOCK, block_q_dkv=bwd,
                                 block_kv_dkv=bwd, block_q_dq=bwd, block_kv_dq=bwd)
  mha = functools.partial(pallas_gpu.mha, sm_scale=h ** -0.5, causal=True,
                          block_sizes=blocks, interpret=interpret)
  out_BxTxNxH = per_device_rows(mha, q_BxTxNxH, repeat(k_BxTxKxH), repeat(v_BxTxKxH), seg_BxTp)
  out_BxTxKxGxH = out_BxTxNxH[:, :t].reshape(b, t, kv, g, h)
  return jnp.where((seg_BxT > 0)[:, :, None, None, None], out_BxTxKxGxH, 0).astype(
      q_BxTxKxGxH.dtype)


def packed_gpu_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, seg_BxT, *,
                         kernel: str | None = None):
  """Packed rows on a GPU by ``kernel`` (default: `graft_jax.backends.
  packed_attention_kernel`'s choice). 'cudnn_packed' takes rows of up to
  `packed_attention.MAX_SEGMENTS` sequences; a call with a fuller row runs the Pallas
  kernel instead (``lax.cond``: the choice is made on the device, per call)."""
  kernel = kernel or backends.packed_attention_kernel(q_BxTxKxGxH.dtype, q_BxTxKxGxH.shape[-1])
  if kernel != "cudnn_packed":
    return pallas_segment_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, seg_BxT)
  return jax.lax.cond(packed_attention.fits(seg_BxT), packed_attention.cudnn_packed_attention,
                      pallas_segment_attention, q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, seg_BxT)


def describe_packed(dtype, head_dim: int, *, capability: str | None = None) -> str:
  """One line for the run's log: the kernel packed rows run in on this GPU, and why."""
  kernel = backends.packed_attention_kernel(dtype, head_dim, capability=capability)
  if kernel == "cudnn_packed":
    return (f"cudnn_packed (each sequence alone, up to {packed_attention.MAX_SEGMENTS} "
            f"per row, 'pallas' beyond)")
  return ("pallas (cuDNN packs only on CUDA compute capability >= 9.0, bf16 / fp16, "
          f"head_dim <= {CUDNN_MAX_HEAD_DIM}; every causal tile of the row)")


def cudnn_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT, *,
                    implementation: str = "cudnn"):
  """cuDNN's flash attention (GPU; bf16 / fp16): causal within each row's span,
  GQA through the kv-head count, no T x T scores in memory. ``implementation="xla"``
  runs the same call through XLA (a CPU check of everything around the kernel).
  Packed rows (segment ids) go to `packed_gpu_attention`."""
  if is_segments(kv_mask_BxT):
    return packed_gpu_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT)

  def attend(q, k, v, length_B):
    b, t, kv, g, h = q.shape
    lengths_B = jnp.maximum(length_B, 1)
    # Query head n = k * G + j shares kv head k: the grouping dot_product_attention uses.
    out_BxTxNxH = jax.nn.dot_product_attention(
        q.reshape(b, t, kv * g, h), k, v, is_causal=True, query_seq_lengths=lengths_B,
        key_value_seq_lengths=lengths_B, implementation=implementation)
    return out_BxTxNxH.reshape(b, t, kv, g, h)

  return _spans_to_front(attend, q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT)


def splash_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT, *,
                     interpret: bool | None = None):
  """The Pallas splash-attention kernel (TPU; ``interpret`` runs it anywhere, and
  is the default off a TPU): a static causal mask and segment ids (1 on a row's
  span, 0 on its padding), rows padded to a multiple of `SPLASH_BLOCK`."""
  from jax.experimental.pallas.ops.tpu.splash_attention import (  # pylint: disable=g-import-not-at-top
      splash_attention_kernel as splash, splash_attention_mask as splash_mask)

  if interpret is None:
    interpret = not (backends.platform() == "tpu" and backends.kernels_native())

  def attend(q, k, v, length_B=None, seg_BxT=None):
    b, t, kv, g, h = q.shape
    tp = -(-t // SPLASH_BLOCK) * SPLASH_BLOCK
    widen = lambda x: _pad_to_block(x, tp)
    q, k, v = widen(q * jnp.asarray(h ** -0.5, q.dtype)), widen(k), widen(v)
    if seg_BxT is None:
      seg_BxT = (jnp.arange(tp)[None, :] < length_B[:, None]).astype(jnp.int32)
    else:
      seg_BxT = widen(seg_BxT.astype(jnp.int32))
    blocks = splash.BlockSizes(block_q=SPLASH_BLOCK, block_kv=SPLASH_BLOCK,
                               block_kv_compute=SPLASH_BLOCK, block_q_dkv=SPLASH_BLOCK,
                               block_kv_dkv=SPLASH_BLOCK, block_kv_dkv_compute=SPLASH_BLOCK,
                               block_q_dq=SPLASH_BLOCK, block_kv_dq=SPLASH_BLOCK)
    mask = splash_mask.MultiHeadMask([splash_mask.CausalMask((tp, tp))] * (kv * g))
    kernel = splash.make_splash_mha(mask, block_sizes=blocks, head_shards=1, q_seq_shards=1,
                                    interpret=interpret)

    def one_row(q_TxKxGxH, k_TxKxH, v_TxKxH, seg_T):
      out_NxTxH = kernel(q_TxKxGxH.reshape(tp, kv * g, h).swapaxes(0, 1),
                         k_TxKxH.swapaxes(0, 1), v_TxKxH.swapaxes(0, 1),
                         segment_ids=splash.SegmentIds(seg_T, seg_T))
      return out_NxTxH.swapaxes(0, 1).reshape(tp, kv, g, h)

    return per_device_rows(jax.vmap(one_row), q, k, v, seg_BxT)[:, :t]

  if is_segments(kv_mask_BxT):
    # Splash masks by segment id itself; padding (segment 0) is zeroed after.
    out_BxTxKxGxH = attend(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, seg_BxT=kv_mask_BxT)
    real = (kv_mask_BxT > 0)[:, :, None, None, None]
    return jnp.where(real, out_BxTxKxGxH, 0).astype(q_BxTxKxGxH.dtype)
  return _spans_to_front(attend, q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT)


def attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT, *, impl: str = "auto",
              block: int = 512):
  """Causal self-attention by ``impl`` (see the module docstring; 'auto' is
  `resolve_impl`'s choice for this backend, dtype and length)."""
  impl = resolve_impl(impl, dtype=q_BxTxKxGxH.dtype, head_dim=q_BxTxKxGxH.shape[-1],
                      length=q_BxTxKxGxH.shape[1], block=block)
  if impl == "dense":
    return dense_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT)
  if impl == "blocked":
    return blocked_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT, block=block)
  if impl == "cudnn":
    return cudnn_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT)
  return splash_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, kv_mask_BxT)
