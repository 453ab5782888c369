"""Whole sequences packed into rows of one fixed length, told apart by segment ids.

A row of `packed_row_length` tokens (the run's longest sequence, rounded up to
`ROW_ALIGN`) holds as many sequences as first-fit decreasing puts in it:
sequences go in order of decreasing length, each into the first row with room
for it, a new row when none has. Sequence j of a row gets segment id j + 1 and
positions 0, 1, ... of its own; padding gets segment 0
(`graft_jax.models.decoder`), so each sequence is computed as if it were alone.

A call (a scoring pass, a gradient micro-batch) takes `rows_per_call` rows per
device: as many rows of the fixed length as fit the token budget, at least one.
Every call of a run then has one shape whatever the lengths, and a second one
only for a sequence longer than the row (a peer's text re-tokenized can outgrow
the run's budget): it gets a row of its own, of twice the length, or beyond that
a power of two of `ROW_ALIGN`. Padding is what is left of the last row of a
sequence set and the unused rows of the last call.
"""

from __future__ import annotations

import dataclasses

import numpy as np

# Row lengths are multiples of this; the GPU and TPU kernels pad a row to their
# own block (`graft_jax.models.attention`), which a run's cap usually is already.
ROW_ALIGN = 16


def packed_row_length(cap_tokens: int, longest: int = 0, *, align: int = ROW_ALIGN) -> int:
  """The length of a packed row: ``max(cap_tokens, longest)`` rounded up to ``align``
  (``cap_tokens``: the run's ``max_prompt_len + max_response_len``)."""
  return -(-max(int(cap_tokens), int(longest), 1) // align) * align


def long_row_length(n_tokens: int, row_length: int, *, align: int = ROW_ALIGN) -> int:
  """The row of a sequence longer than ``row_length``: ``2 * row_length`` if it fits,
  else the smallest ``align * 2**j`` that holds it."""
  if n_tokens <= 2 * row_length:
    return 2 * row_length
  return align << (-(-int(n_tokens) // align) - 1).bit_length()


def rows_per_call(budget_tokens: int, row_length: int, cap_rows: int = 0) -> int:
  """Rows of ``row_length`` per device per call: ``budget_tokens // row_length``, at least
  one; with no budget (0) ``cap_rows`` (at least one)."""
  if budget_tokens <= 0:
    return max(1, cap_rows)
  return max(1, int(budget_tokens) // int(row_length))


def first_fit_decreasing(lengths_N, capacity: int) -> list[list[int]]:
  """Bins of sequence indices whose lengths sum to at most ``capacity`` each (a longer
  sequence gets a bin of its own), by first-fit decreasing. Deterministic: ties keep
  the input order."""
  lengths_N = np.asarray(lengths_N, np.int64)
  bins: list[list[int]] = []
  room: list[int] = []
  for i in np.argsort(-lengths_N, kind="stable"):
    n = int(lengths_N[i])
    for j, free in enumerate(room):
      if n <= free:
        bins[j].append(int(i))
        room[j] -= n
        break
    else:
      bins.append([int(i)])
      room.append(capacity - n)
  return bins


@dataclasses.dataclass(frozen=True)
class PackedRows:
  """Rows of packed sequences: ``ids_RxL`` and ``segment_ids_RxL`` (0 on padding),
  and where each sequence n lies: row ``row_N[n]`` from column ``start_N[n]`` (-1 for a
  sequence left out)."""

  ids_RxL: np.ndarray
  segment_ids_RxL: np.ndarray
  row_N: np.ndarray
  start_N: np.ndarray


def pack_sequences(seqs, row_length: int, pad_id: int, *, bins=None,
                   num_rows: int | None = None) -> PackedRows:
  """Sequences (id lists) packed into ``num_rows`` (default: as many as needed) rows of
  ``row_length``, by `first_fit_decreasing` or the given ``bins`` (index lists)."""
  lengths = [len(s) for s in seqs]
  if bins is None:
    bins = first_fit_decreasing(lengths, row_length)
  num_rows = len(bins) if num_rows is None else num_rows
  if len(bins) > num_rows:
    raise ValueError(f"pack_sequences: {len(bins)} rows of sequences, room for {num_rows}")
  return PackedRows(*lay_out(seqs, bins, row_length, num_rows, fill=pad_id, dtype=np.int32))


def lay_out(seqs, bins, row_length: int, num_rows: int, *, fill=0, dtype=np.int32):
  """The right-padding of sequences (1-D, of ids or of per-token values): each bin's
  sequences side by side from column 0 of its row of ``row_length``, ``fill`` after
  them and in the rows past the bins. One bin per sequence is a right-padded batch.

  Returns:
    (values_RxL, segment_ids_RxL, row_N, start_N): a sequence's row and first column
    (-1 for one in no bin) and its place in the row (j + 1; padding 0).
  """
  out = np.full((num_rows, row_length), fill, dtype)
  seg = np.zeros((num_rows, row_length), np.int32)
  row_N = np.full(len(seqs), -1, np.int64)
  start_N = np.full(len(seqs), -1, np.int64)
  for r, members in enumerate(bins):
    col = 0
    for j, n in enumerate(members):
      k = len(seqs[n])
      if col + k > row_length:
        raise ValueError(f"pack_sequences: row {r} holds {col + k} tokens, "
                         f"more than its {row_length}")
      out[r, col:col + k] = seqs[n]
      seg[r, col:col + k] = j + 1
      row_N[n], start_N[n] = r, col
      col += k
  return out, seg, row_N, start_N


def plan_calls(lengths_N, row_length: int, rows: int,
               max_per_row: int = 0) -> list[tuple[list[list[int]], int]]:
  """``[(bins, length)]``: the packed rows of each call, ``rows`` per call (the last
  call's rest is empty rows), at the row length ``length``. Sequences up to
  ``row_length`` share rows of that length, at most ``max_per_row`` per row (0: any
  number); a longer one gets a row of its own at `long_row_length`."""
  lengths_N = np.asarray(lengths_N, np.int64)
  short = np.flatnonzero(lengths_N <= row_length)
  bins = []
  for b in first_fit_decreasing(lengths_N[short], row_length):
    step = max_per_row or len(b)
    bins += [[int(short[i]) for i in b[j:j + step]] for j in range(0, len(b), step)]
  calls = [(bins[i:i + rows], row_length) for i in range(0, len(bins), rows)]
  by_length: dict[int, list[list[int]]] = {}
  for n in np.flatnonzero(lengths_N > row_length):
    by_length.setdefault(long_row_length(lengths_N[n], row_length), []).append([int(n)])
  for length, long_bins in sorted(by_length.items()):
    calls += [(long_bins[i:i + rows], length) for i in range(0, len(long_bins), rows)]
  return calls


def padding_fraction(real_tokens: int, computed_tokens: int) -> float:
  """The share of computed tokens that are padding (0 when nothing is computed)."""
  return 1.0 - real_tokens / computed_tokens if computed_tokens else 0.0
