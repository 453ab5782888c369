"""Packed rows (segment ids) in cuDNN's packed layout: each sequence of a row attended
alone, no tile computed across two of them.

A packed row holds sequences one after another, segment ids 1, 2, ... on their
tokens and 0 on padding (`graft_jax.packing.sequence_packing`). cuDNN's flash
attention takes such rows as they lie in memory when it is told where each
sequence starts and how long it is: for row b and its j-th sequence (a maximal
run of one nonzero id),

.. math::
    \\mathrm{offset}_{b,j} = \\text{its first slot},\\qquad
    \\mathrm{seqlen}_{b,j} = \\text{its tokens},

-1 for j past the row's sequences, offsets with one column more (cuDNN's shape
[B, M+1]). M, the sequences a row may hold, must be static: `MAX_SEGMENTS`, twice the
update packer's cap of 8 per row (`graft_jax.train.packed_micro_batches`); a call
whose rows hold more goes to the Pallas kernel instead
(`graft_jax.models.attention.packed_gpu_attention`), since a sequence cuDNN is not
told of would read as padding. Each sequence is then causal from its own first token
(mask ``PADDING_CAUSAL``), GQA through the kv-head count: a row costs the sum of its
sequences' triangles, not the whole row's, and no kv head is repeated.

cuDNN packs only on Hopper or later (compute capability >= 9.0) and with bf16 /
fp16 inputs, head_dim <= 128 here; `graft_jax.backends.packed_attention_kernel`
chooses. A sequence must be one run of slots (the packer's rows are): the same id
in two places counts as two sequences, where the mask-based kernels would join them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# The sequences a row may hold in cuDNN's packed layout (its static M).
MAX_SEGMENTS = 16


def segment_runs(seg_BxT, max_segments: int = MAX_SEGMENTS):
  """(offsets_BxM1, seqlen_BxM, count_B) int32 of packed rows (`seg_BxT`: 0 on
  padding): each row's j-th run of one nonzero segment id starts at slot
  ``offsets[b, j]`` and holds ``seqlen[b, j]`` tokens, -1 for j >= count_B[b] and in
  offsets' last column. Runs past ``max_segments`` are counted in ``count_B`` only."""
  seg_BxT = seg_BxT.astype(jnp.int32)
  b, t = seg_BxT.shape
  m = int(max_segments)
  real_BxT = seg_BxT > 0
  before_BxT = jnp.pad(seg_BxT[:, :-1], ((0, 0), (1, 0)))  # slot -1 is padding
  first_BxT = real_BxT & (seg_BxT != before_BxT)
  run_BxT = jnp.cumsum(first_BxT, axis=1, dtype=jnp.int32) - 1  # run of each real token
  count_B = run_BxT[:, -1] + 1
  in_run_BxTxM = real_BxT[:, :, None] & (run_BxT[:, :, None] == jnp.arange(m))
  seqlen_BxM = in_run_BxTxM.sum(axis=1, dtype=jnp.int32)
  starts_BxM = jnp.where(in_run_BxTxM & first_BxT[:, :, None],
                         jnp.arange(t, dtype=jnp.int32)[None, :, None], 0).sum(axis=1)
  present_BxM = jnp.arange(m)[None, :] < count_B[:, None]
  seqlen_BxM = jnp.where(present_BxM, seqlen_BxM, -1)
  offsets_BxM1 = jnp.concatenate(
      [jnp.where(present_BxM, starts_BxM, -1), jnp.full((b, 1), -1, jnp.int32)], axis=1)
  return offsets_BxM1, seqlen_BxM, count_B


def cudnn_packed_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, seg_BxT, *,
                           max_segments: int = MAX_SEGMENTS):
  """cuDNN's flash attention over each row's sequences in its packed layout (GPU,
  Hopper or later; the row's runs from `segment_runs`, at most ``max_segments`` per
  row). Outputs 0 at padding (segment 0)."""
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa  # pylint: disable=g-import-not-at-top

  b, t, kv, g, h = q_BxTxKxGxH.shape
  offsets_BxM1, seqlen_BxM, _ = segment_runs(seg_BxT, max_segments)
  # cuDNN computes nothing at a slot outside the sequences it is told of: its output
  # and dQ, dK, dV there are undefined. Selecting the inputs and the output there
  # makes their gradient 0 at those slots whatever cuDNN leaves in them.
  real_BxT = seg_BxT > 0
  real = lambda x: jnp.where(real_BxT.reshape(real_BxT.shape + (1,) * (x.ndim - 2)), x, 0)
  # Query head n = k * G + j shares kv head k: cuDNN's grouping.
  out_BxTxNxH = cudnn_fa.dot_product_attention(
      real(q_BxTxKxGxH).reshape(b, t, kv * g, h), real(k_BxTxKxH), real(v_BxTxKxH),
      q_seqlen=seqlen_BxM, kv_seqlen=seqlen_BxM, q_offsets=offsets_BxM1,
      kv_offsets=offsets_BxM1, scale=h ** -0.5, mask_type=cudnn_fa.MaskType.PADDING_CAUSAL,
      qkv_layout="BTNH")
  return real(out_BxTxNxH.reshape(b, t, kv, g, h)).astype(q_BxTxKxGxH.dtype)


def fits(seg_BxT, max_segments: int = MAX_SEGMENTS) -> jax.Array:
  """Whether every row holds at most ``max_segments`` sequences (a traced bool)."""
  return jnp.all(segment_runs(seg_BxT, max_segments)[2] <= max_segments)
