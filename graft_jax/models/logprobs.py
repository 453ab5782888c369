"""Teacher-forced per-token log-probs of given tokens, and packing of (prompt, response) pairs.

`token_logprobs` is a pure function of the model, so it can sit inside a
jitted, differentiated loss: `lambda state: token_logprobs(nnx.merge(gd, state), ...)`.
`token_logprobs_jit` is the compiled version for scoring outside a loss.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from graft_jax.sharding.place import batch_shards, batch_sharding


LOGITS_CHUNK = 512  # positions per logits block in `token_logprobs`


def token_logprobs(model, ids_BxT, attn_mask_BxT, *, temperature=1.0, chunk=LOGITS_CHUNK,
                   segment_ids_BxT=None):
  """logp_BxT[b, t] = log softmax(logits(ids[b, :t]) / temperature)[ids[b, t]].

  Column 0 (no context) and masked positions are 0. Rows may be right- or
  left-padded; positions follow `attn_mask_BxT`. Returns float32. Packed rows
  pass `segment_ids_BxT` (`graft_jax.models.decoder`; ``attn_mask_BxT`` is then
  ``segment_ids_BxT > 0``): the context of a token is its own sequence's earlier
  tokens, and each sequence's first token, like column 0, gets 0.

  The logits are formed ``chunk`` positions at a time (``jax.lax.map`` over
  blocks, each under ``jax.checkpoint``), so neither the forward pass nor its
  gradient holds a B x T x V array: at T = 6144 and a 152k vocabulary that
  would be 3.7 GB per row in fp32. Each position's value is the same
  computation as in the full logits. ``chunk=None`` forms them all at once.
  """
  mask_BxT = attn_mask_BxT.astype(bool)
  if segment_ids_BxT is None:
    x_BxTxD = model.hidden(ids_BxT, mask_BxT)
  else:
    x_BxTxD = model.hidden(ids_BxT, segment_ids_BxT=segment_ids_BxT)
    seg_BxT = jnp.asarray(segment_ids_BxT)
    # A sequence's first token has no context in its own sequence.
    mask_BxT = mask_BxT & jnp.pad(seg_BxT[:, 1:] == seg_BxT[:, :-1], ((0, 0), (1, 0)))
  # Position t's logits score token t + 1.
  next_ids_BxT1 = ids_BxT[:, 1:]

  def picked_logp(logits_BxCxV, ids_BxC):
    picked_BxC = jnp.take_along_axis(logits_BxCxV, ids_BxC[..., None], axis=-1)[..., 0]
    return picked_BxC - jax.nn.logsumexp(logits_BxCxV, axis=-1)

  def block_logp(x_BxCxD, ids_BxC):
    return picked_logp(model.logits(x_BxCxD) / temperature, ids_BxC)

  b, t, d = x_BxTxD.shape
  t1 = t - 1
  if chunk is None or t1 <= chunk:
    # One projection of all T positions, as `model(ids)` gives them (the last one
    # is unused): short sequences keep the exact float results they always had.
    logits_BxTxV = model.logits(x_BxTxD) / temperature
    logp_BxT1 = picked_logp(logits_BxTxV[:, :-1], next_ids_BxT1)
  else:
    x_BxT1xD = x_BxTxD[:, :-1]
    blocks = -(-t1 // chunk)
    pad = blocks * chunk - t1
    x_NxBxCxD = jnp.pad(x_BxT1xD, ((0, 0), (0, pad), (0, 0))).reshape(
        b, blocks, chunk, d).swapaxes(0, 1)
    ids_NxBxC = jnp.pad(next_ids_BxT1, ((0, 0), (0, pad))).reshape(
        b, blocks, chunk).swapaxes(0, 1)
    # Under checkpoint, the backward pass recomputes each block's logits instead
    # of keeping all of them.
    logp_NxBxC = jax.lax.map(lambda xs: jax.checkpoint(block_logp)(*xs), (x_NxBxCxD, ids_NxBxC))
    logp_BxT1 = logp_NxBxC.swapaxes(0, 1).reshape(b, blocks * chunk)[:, :t1]
  logp_BxT = jnp.pad(logp_BxT1, ((0, 0), (1, 0)))
  return jnp.where(mask_BxT, logp_BxT, 0.0).astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=0)
def _token_logprobs_split(graphdef, state, ids_BxT, attn_mask_BxT, temperature):
  return token_logprobs(nnx.merge(graphdef, state), ids_BxT, attn_mask_BxT,
                        temperature=temperature)


@functools.partial(jax.jit, static_argnums=0)
def _token_logprobs_packed(graphdef, state, ids_BxT, segment_ids_BxT, temperature):
  return token_logprobs(nnx.merge(graphdef, state), ids_BxT, segment_ids_BxT > 0,
                        temperature=temperature, segment_ids_BxT=segment_ids_BxT)


def row_sharding(model) -> NamedSharding | None:
  """How scoring splits rows: over the batch rule ('data' x 'fsdp') of the mesh the
  model's parameters live on, so each device scores its own rows against the
  gathered weights (FSDP's pattern). None for a model on one device."""
  leaf = jax.tree.leaves(nnx.state(model))[0]
  sharding = getattr(leaf, "sharding", None)
  if not isinstance(sharding, NamedSharding) or sharding.mesh.size == 1:
    return None
  return batch_sharding(sharding.mesh)


def row_shards(model) -> int:
  """How many parts `row_sharding` splits a scoring batch's rows into."""
  sharding = row_sharding(model)
  return 1 if sharding is None else batch_shards(sharding.mesh)


def _place(x, sharding):
  """A host array laid out by ``sharding`` (every process holds the whole array)."""
  x = np.asarray(x)
  if sharding is None:
    # Host arrays go straight to the compiled program: `jnp.asarray` would compile
    # a staging program for every new shape.
    return x
  return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def token_logprobs_jit(model, ids_BxT, attn_mask_BxT, *, temperature=1.0,
                      segment_ids_BxT=None):
  """Compiled `token_logprobs`; recompiles only for new shapes, not new weights.
  Packed rows pass ``segment_ids_BxT`` (``attn_mask_BxT`` is then not read).

  On a mesh, rows are split over its batch axes (`row_sharding`) where B divides
  by `row_shards` (`score_rows` pads its chunks so), else every device takes them
  all; the result comes back to every process whole.
  """
  graphdef, state = nnx.split(model)
  sharding = row_sharding(model)
  if sharding is not None and len(ids_BxT) % batch_shards(sharding.mesh):
    sharding = None  # a batch the devices cannot split evenly (a one-row probe) goes whole
  if segment_ids_BxT is None:
    logp_BxT = _token_logprobs_split(graphdef, state, _place(ids_BxT, sharding),
                                     _place(attn_mask_BxT, sharding), np.float32(temperature))
  else:
    logp_BxT = _token_logprobs_packed(graphdef, state, _place(ids_BxT, sharding),
                                      _place(segment_ids_BxT, sharding), np.float32(temperature))
  if sharding is not None:
    logp_BxT = _to_every_device(sharding.mesh)(logp_BxT)
  return logp_BxT


@functools.lru_cache(maxsize=None)
def _to_every_device(mesh):
  """The identity, compiled once per mesh, whose output is replicated on it."""
  return jax.jit(lambda x: x, out_shardings=NamedSharding(mesh, PartitionSpec()))


def bucket_length(longest: int, cap: int = 0, *, align: int = 16, floor: int = 128) -> int:
  """The padded length of rows of at most ``longest`` tokens: one of a few sizes.

  ``cap`` is the run's budget, ``max_prompt_len + max_response_len``. Rows
  within it pad to the smallest of ``cap * (3/4)^k`` (rounded up to ``align``)
  that holds them, never below ``min(cap, floor)``: under ~``floor`` tokens a
  compilation costs more than the padding it saves, so a small run has one
  shape, and a row wastes under a third of its length (or of ``floor``).
  Longer rows (a peer's text re-tokenized can outgrow the budget), or every
  row when ``cap`` is 0, pad to ``align`` times a power of two.
  """
  up = lambda x: -(-int(np.ceil(x)) // align) * align
  longest = max(int(longest), 1)
  top = up(cap) if cap > 0 else 0
  if longest > top:
    return align << (-(-longest // align) - 1).bit_length()
  low, size = up(min(cap, floor)), top
  while up(size * 3 / 4) >= max(low, longest) and up(size * 3 / 4) < size:
    size = up(size * 3 / 4)
  return size


@dataclasses.dataclass(frozen=True)
class PackedPairs:
  """Right-padded `[prompt | response | pad]` rows.

  `response_mask_BxT` is True on response tokens: the positions whose
  `token_logprobs` score the response under the prompt.
  """

  ids_BxT: np.ndarray
  attn_mask_BxT: np.ndarray
  response_mask_BxT: np.ndarray
  prompt_lens_B: np.ndarray
  response_lens_B: np.ndarray

  def responses(self, values_BxT) -> list[np.ndarray]:
    """Per row, the entries of `values_BxT` on that row's response tokens."""
    values_BxT = np.asarray(values_BxT)
    return [values_BxT[b, p:p + r] for b, (p, r) in
            enumerate(zip(self.prompt_lens_B, self.response_lens_B))]


def pack_pairs(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
               pad_id: int, *, multiple: int = 64, min_len: int = 0) -> PackedPairs:
  """Packs ragged id lists into right-padded arrays of length rounded up to `multiple`.

  Rounding keeps the number of distinct shapes (and compilations) small.
  Prompts must be non-empty: the first response token needs a context.
  """
  if len(prompts) != len(responses):
    raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
  if any(len(p) == 0 for p in prompts):
    raise ValueError("pack_pairs: empty prompt (the first response token needs context)")
  lens = [len(p) + len(r) for p, r in zip(prompts, responses)]
  longest = max(lens + [min_len, 1])
  t = -(-longest // multiple) * multiple
  b = len(prompts)
  ids = np.full((b, t), pad_id, np.int32)
  attn = np.zeros((b, t), bool)
  resp = np.zeros((b, t), bool)
  for i, (p, r) in enumerate(zip(prompts, responses)):
    ids[i, :len(p) + len(r)] = list(p) + list(r)
    attn[i, :len(p) + len(r)] = True
    resp[i, len(p):len(p) + len(r)] = True
  return PackedPairs(ids, attn, resp, np.array([len(p) for p in prompts], np.int32),
                     np.array([len(r) for r in responses], np.int32))
