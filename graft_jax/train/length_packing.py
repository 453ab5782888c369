"""Cutting a minibatch into micro-batches packed by length under a token budget.

Rows are right-padded (real tokens first), so a row of n real tokens fits any
length L >= n by dropping columns. Each row's *bucket* is the smallest
L = ``multiple`` * 2^j with L >= n (capped at the minibatch's T). Rows go in
order of decreasing length; a micro-batch takes the bucket L of its first
(longest) row and holds

    R(L) = max(1, budget // L) rows per device  x  the devices that split rows

(capped at the minibatch), filled with the next rows whatever their bucket. So a
micro-batch of short rows holds more of them, every micro-batch stays within
the budget, and the shapes (R(L), L) come from a small fixed set: a new mix of
lengths in a later step reuses the programs compiled for them. Rows added to
fill a micro-batch are zero rows with an all-zero mask, outside every sum.
"""

from __future__ import annotations

import itertools

import numpy as np

from graft_jax.train.update_rows import TOKEN_FIELDS  # the per-token inputs: trimmed to L


def length_bucket(n_tokens, t: int, multiple: int = 64):
  """The smallest ``multiple * 2**j`` >= n (at least ``multiple``), capped at ``t``."""
  n = np.maximum(np.asarray(n_tokens), 1)
  j = np.ceil(np.log2(np.maximum(n / multiple, 1.0))).astype(np.int64)
  return np.minimum(multiple * 2 ** j, t)


def plan_micro_batches(lengths_B, t: int, budget_tokens: int, shards: int = 1,
                       multiple: int = 64, num_rows: int | None = None
                       ) -> list[tuple[np.ndarray, int, int]]:
  """``[(row indices, R, L)]``: each micro-batch's rows (longest first), its row count
  R (the indices may be fewer: the rest is padding) and its length L. R is capped by
  the minibatch's ``num_rows`` (default: the rows planned), so planning a subset of
  a minibatch's rows gives the shapes the whole minibatch would have."""
  lengths_B = np.asarray(lengths_B)
  b = len(lengths_B)
  order = np.argsort(-lengths_B, kind="stable")
  cap = -(-(b if num_rows is None else num_rows) // shards)  # rows per device: the whole minibatch
  out, start = [], 0
  while start < b:
    length = int(length_bucket(lengths_B[order[start]], t, multiple))
    rows = min(max(1, budget_tokens // length), cap) * shards
    out.append((order[start:start + rows], rows, length))
    start += rows
  return out


def gather_micro_batch(batch: dict, idx, rows: int, length: int) -> dict:
  """The rows ``idx`` of a host minibatch, token fields cut to ``length`` columns,
  zero rows appended up to ``rows``."""
  out = {}
  for k, v in batch.items():
    v = np.asarray(v)[idx]
    if k in TOKEN_FIELDS:
      v = v[:, :length]
    padded = np.zeros((rows,) + v.shape[1:], v.dtype)
    padded[:len(idx)] = v
    out[k] = padded
  return out


def by_shape(plan) -> list[tuple[tuple[int, int], list[tuple[int, np.ndarray]]]]:
  """The plan's micro-batches grouped by shape: ``[((R, L), [(position in plan, row
  indices)])]``. Lengths never grow along a plan and R follows from L, so each shape
  is one consecutive run."""
  return [(shape, [(i, idx) for i, (idx, _, _) in group])
          for shape, group in itertools.groupby(enumerate(plan), key=lambda e: e[1][1:])]


def stack_micro_batches(batch: dict, entries, rows: int, length: int, slots: int) -> dict:
  """The micro-batches ``entries`` (``(position, row indices)``, all of shape
  (``rows``, ``length``)) as `gather_micro_batch` builds them, stacked on a leading
  axis of ``slots``; the slots after them hold zero micro-batches."""
  mbs = [gather_micro_batch(batch, idx, rows, length) for _, idx in entries]
  out = {}
  for k, v in mbs[0].items():
    out[k] = np.zeros((slots,) + v.shape, v.dtype)
    for j, mb in enumerate(mbs):
      out[k][j] = mb[k]
  return out
