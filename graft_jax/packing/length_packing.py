"""Cutting a minibatch into micro-batches packed by length under a token budget.

Rows are right-padded (real tokens first), so a row of n real tokens fits any
length L >= n by dropping columns. Each row's *bucket* is the smallest
L = ``multiple`` * 2^j with L >= n (capped at the minibatch's T). Rows go in
order of decreasing length; a micro-batch takes the bucket L of its first
(longest) row and holds

    R(L) = max(1, budget // L) rows per device  x  the devices that split rows

(capped at the minibatch), filled with the next rows whatever their bucket. So a
micro-batch of short rows holds more of them, every micro-batch stays within
the budget, and the shapes (R(L), L) come from a small set fixed by the run's
settings (`run_shapes`): a new mix of lengths in a later step reuses the
programs compiled for them. Rows added to
fill a micro-batch are zero rows with an all-zero mask, outside every sum.
"""

from __future__ import annotations

import jax
import numpy as np


def length_bucket(n_tokens, t: int, multiple: int = 64):
  """The smallest ``multiple * 2**j`` >= n (at least ``multiple``), capped at ``t``."""
  n = np.maximum(np.asarray(n_tokens), 1)
  j = np.ceil(np.log2(np.maximum(n / multiple, 1.0))).astype(np.int64)
  return np.minimum(multiple * 2 ** j, t)


def plan_micro_batches(lengths_B, t: int, budget_tokens: int, shards: int = 1,
                       multiple: int = 64, num_rows: int | None = None
                       ) -> list[tuple[np.ndarray, int, int]]:
  """``[(row indices, R, L)]``: each micro-batch's rows (longest first), its row count
  R (the indices may be fewer: the rest is padding) and its length L; a budget of 0
  puts every row in one micro-batch. R is capped by
  the minibatch's ``num_rows`` (default: the rows planned), so planning a subset of
  a minibatch's rows gives the shapes the whole minibatch would have."""
  lengths_B = np.asarray(lengths_B)
  b = len(lengths_B)
  order = np.argsort(-lengths_B, kind="stable")
  cap = -(-(b if num_rows is None else num_rows) // shards)  # rows per device: the whole minibatch
  out, start = [], 0
  while start < b:
    length = int(length_bucket(lengths_B[order[start]], t, multiple))
    rows = (min(max(1, budget_tokens // length), cap) if budget_tokens > 0 else cap) * shards
    out.append((order[start:start + rows], rows, length))
    start += rows
  return out


def run_shapes(num_rows: int, t: int, budget_tokens: int, shards: int = 1,
               multiple: int = 64) -> list[tuple[int, int, int]]:
  """Every micro-batch shape ``(slots, R, L)`` a minibatch of ``num_rows`` rows padded to
  ``t`` tokens can take, one per length bucket: the micro-batches of one shape stack
  in ``slots = ceil(num_rows / R)`` (as many as it can have). The set depends on the
  run's settings only, never on a step's lengths, so compiling it once is all a run
  compiles."""
  out, length = [], 0
  while length < t:
    length = int(length_bucket(2 * length or 1, t, multiple))
    rows = plan_micro_batches([length], t, budget_tokens, shards, multiple, num_rows)[0][1]
    out.append((-(-num_rows // rows), rows, length))
  return out


def stack_micro_batches(batch, entries, rows: int, length: int, slots: int):
  """The micro-batches ``entries`` (row indices, all of shape (``rows``, ``length``)) of
  a host ``batch`` (a ``flax.struct`` dataclass of B x T and B arrays) stacked on a
  leading axis of ``slots``: per-token fields cut to ``length`` columns, zero rows
  after a micro-batch's own, zero micro-batches after the last."""

  def stack(v):
    v = np.asarray(v)
    out = np.zeros((slots, rows, length) if v.ndim == 2 else (slots, rows), v.dtype)
    for j, idx in enumerate(entries):
      out[j, :len(idx)] = v[idx, :length] if v.ndim == 2 else v[idx]
    return out

  return jax.tree.map(stack, batch)
