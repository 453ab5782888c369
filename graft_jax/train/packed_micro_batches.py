"""The update's micro-batches as packed rows: the model runs on whole sequences packed
into rows of one length, the loss reads them as the rows it always had.

A minibatch's rows (right-padded, one (prompt, response) sequence each) are packed
by `sequence_packing` into rows of ``row_length`` tokens, at most
`SEQS_PER_ROW` sequences per row, and the packed rows go ``rows_per_call`` per
device into micro-batches (``micro_batch_tokens`` per device). A micro-batch
carries

- the packed ``ids`` and ``segment_ids`` (R x L): what the forward runs on, and
- the *row view*: its sequences as the loss's batch of ``R * SEQS_PER_ROW`` rows
  of L columns (zero rows after its own), with where each row lies in the packed
  rows (``row``, ``start``).

`packed_logprobs_BxT` scores the packed rows and gathers each row view's
log-probs back, so the loss, its totals and its metrics see the same rows and
values as without packing: the gradient is the unpacked per-sequence one, the
token mean still over the whole minibatch (`graft_jax.train.update`). The
shapes (R, L) are one per run, two if a sequence outgrows the row
(`run_shapes`), whatever the lengths.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from graft_jax.models import token_logprobs
from graft_jax.packing import sequence_packing

# At most this many sequences share a packed row: it sizes the loss's row view.
SEQS_PER_ROW = 8


@flax.struct.dataclass
class Packing:
  """Where a micro-batch's row view lies in its packed rows (row view rows V)."""

  ids: jax.Array       # R x L
  segment_ids: jax.Array  # R x L, 0 on padding
  row: jax.Array       # V: the packed row of each row-view row
  start: jax.Array     # V: its first column there


def plan(lengths_B, row_length: int, budget_tokens: int, shards: int = 1, *,
         num_rows: int = 0) -> tuple[list[tuple[np.ndarray, int, int]], list[list[list[int]]]]:
  """(``[(row indices, R, L)]``, the packed rows of each micro-batch as lists of row
  indices). R counts the micro-batch's packed rows over all devices; the row indices
  index ``lengths_B``. ``num_rows`` (the minibatch's rows) caps the rows per device
  with no budget, as `length_packing.plan_micro_batches` does."""
  rows = sequence_packing.rows_per_call(budget_tokens, row_length,
                                        -(-max(num_rows, len(lengths_B), 1) // shards)) * shards
  calls = sequence_packing.plan_calls(lengths_B, row_length, rows, SEQS_PER_ROW)
  out = [(np.asarray([n for b in bins for n in b], np.int64), rows, length)
         for bins, length in calls]
  return out, [bins for bins, _ in calls]


def run_shapes(num_rows: int, row_length: int, width: int, budget_tokens: int,
               shards: int = 1) -> list[tuple[int, int, int]]:
  """Every micro-batch shape ``(slots, R, L)`` of a minibatch of ``num_rows`` rows of at
  most ``width`` tokens: rows of ``row_length``, and rows of a sequence past it."""
  out = []
  for length in sorted({row_length, *([sequence_packing.long_row_length(width, row_length)]
                                      if width > row_length else [])}):
    rows = plan([length], length, budget_tokens, shards, num_rows=num_rows)[0][0][1]
    out.append((-(-num_rows // rows), rows, length))
  return out


def stack(rows_tree, bins_M, rows: int, length: int, slots: int, pad_id: int = 0):
  """``(*rows_tree cut to the row view, Packing)`` for the micro-batches ``bins_M`` (each
  a list of packed rows, each a list of row indices of ``rows_tree``: a tuple of a
  ``flax.struct`` batch with ``ids`` and ``attn`` and per-row arrays, of B x T and B
  host arrays), stacked on a leading axis of ``slots``; zero rows and micro-batches
  after the real ones."""
  batch = rows_tree[0]
  ids_BxT, attn_BxT = np.asarray(batch.ids), np.asarray(batch.attn, bool)
  seqs = [ids_BxT[n, :k] for n, k in enumerate(attn_BxT.sum(axis=1))]  # right-padded rows
  view = rows * SEQS_PER_ROW
  pos = {f: np.zeros((slots, view) if f in ("row", "start") else (slots, rows, length), np.int32)
         for f in ("ids", "segment_ids", "row", "start")}
  pos["ids"][:] = pad_id
  order = np.zeros((slots, view), np.int64)
  real = np.zeros((slots, view), bool)
  for m, packed_rows in enumerate(bins_M):
    packed = sequence_packing.pack_sequences(seqs, length, pad_id, bins=packed_rows, num_rows=rows)
    pos["ids"][m], pos["segment_ids"][m] = packed.ids_RxL, packed.segment_ids_RxL
    for r, members in enumerate(packed_rows):
      for j, n in enumerate(members):
        # Packed row r's sequences take row-view rows r * K + j: a device's packed
        # rows and their row view lie in the same block of a split over devices.
        v = r * SEQS_PER_ROW + j
        pos["row"][m, v], pos["start"][m, v] = packed.row_N[n], packed.start_N[n]
        order[m, v], real[m, v] = n, True

  def cut(x):
    x = np.asarray(x)
    taken = x[order]
    taken = np.where(real.reshape(real.shape + (1,) * (taken.ndim - 2)), taken, 0).astype(x.dtype)
    if x.ndim == 1:
      return taken
    out = np.zeros((slots, view, length), x.dtype)
    w = min(length, x.shape[1])
    out[..., :w] = taken[..., :w]
    return out

  return (*jax.tree.map(cut, rows_tree), Packing(**pos))


def packed_logprobs_BxT(model, packing: Packing, attn_VxT, *, temperature: float):
  """The row view's token log-probs (V x T, 0 where ``attn_VxT`` is not), from one
  forward over the packed rows: row v's tokens are columns ``start[v]..`` of packed
  row ``row[v]``."""
  logp_RxL = token_logprobs(model, packing.ids, packing.segment_ids > 0,
                            temperature=temperature, segment_ids_BxT=packing.segment_ids)
  cols_VxT = packing.start[:, None] + jnp.arange(attn_VxT.shape[1])[None, :]
  logp_VxT = logp_RxL[packing.row[:, None], jnp.minimum(cols_VxT, logp_RxL.shape[1] - 1)]
  return jnp.where(attn_VxT.astype(bool), logp_VxT, 0.0)
