"""A receiver's update rows for one step, and their packing into fixed-shape minibatches.

Every row is one (prompt, response) pair in the *receiver's* tokenization with
what the loss needs: advantage, gate weight, whether it stays in the loss,
whether it was grafted, its behavior-policy log-probs. Rows are grouped by
prompt, ``rows_per_group`` per prompt, so a minibatch of whole groups always
has the same row count (dropped responses keep their slot with an all-zero
mask), and lengths are rounded up to a multiple: a run compiles a handful of
update programs, not one per step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from graft_jax.packing import sequence_packing

# A row's loss term: PPO's clipped token loss, SGT's NLL, HACPO's sequence loss.
KIND_PPO, KIND_SGT, KIND_HACPO = 0, 1, 2

# What `pack_minibatch` returns for every method, with dtypes: per token (rows x length)
# and per row. A loss batch's other fields are its method's row columns (`RowColumn`).
TOKEN_FIELDS = {"ids": np.int32, "attn": np.bool_, "resp_mask": np.float32,
                "old_logp": np.float32, "ref_logp": np.float32}
ROW_FIELDS = {"adv": np.float32, "weight": np.float32, "grafted": np.float32,
              "ppo": np.float32, "sgt": np.float32}


@dataclasses.dataclass(frozen=True)
class RowColumn:
  """A method's own per-row column, kept in ``Rows.extra`` by the method that builds the
  rows and packed for the loss batches that declare it (their ``ROW_COLUMNS``): its
  name, dtype, and value on a row given none, a constant or ``default(rows, i)``."""

  name: str
  dtype: type
  default: Any

  def value(self, rows: Rows, i: int):
    if self.name in rows.extra[i]:
      return rows.extra[i][self.name]
    return self.default(rows, i) if callable(self.default) else self.default


@dataclasses.dataclass
class Rows:
  """Column store of rows; ``group_R[r]`` is the prompt index (0..G-1). The columns every
  method has, and per row a dict of its method's own (``extra``: `RowColumn`)."""

  prompt_ids: list = dataclasses.field(default_factory=list)
  response_ids: list = dataclasses.field(default_factory=list)
  group: list = dataclasses.field(default_factory=list)
  adv: list = dataclasses.field(default_factory=list)
  weight: list = dataclasses.field(default_factory=list)
  keep: list = dataclasses.field(default_factory=list)
  grafted: list = dataclasses.field(default_factory=list)
  kind: list = dataclasses.field(default_factory=list)
  old_logp: list = dataclasses.field(default_factory=list)
  ref_logp: list = dataclasses.field(default_factory=list)
  # True where ``old_logp`` is the sampler's, standing in for the teacher-forced ones
  # (`graft_jax.train.old_logprobs` scores those the update reads; the update's first
  # forward is pi_old for those left in its first minibatch).
  old_logp_pending: list = dataclasses.field(default_factory=list)
  extra: list = dataclasses.field(default_factory=list)

  def add(self, prompt, response, group, *, adv=0.0, weight=1.0, keep=True, grafted=False,
          kind=KIND_PPO, old_logp=None, old_logp_pending=False, **extra):
    """One row; ``extra`` holds the method's own columns (scalars)."""
    self.prompt_ids.append(list(prompt))
    self.response_ids.append(list(response))
    self.group.append(int(group))
    self.adv.append(float(adv))
    self.weight.append(float(weight))
    self.keep.append(bool(keep) and len(response) > 0)
    self.grafted.append(bool(grafted))
    self.kind.append(int(kind))
    self.old_logp.append(None if old_logp is None else np.asarray(old_logp, np.float32))
    self.ref_logp.append(None)
    self.old_logp_pending.append(bool(old_logp_pending))
    self.extra.append(extra)

  def __len__(self):
    return len(self.group)

  def rows_of_groups(self, groups) -> np.ndarray:
    """Row indices of the given groups, in the order the groups are listed."""
    group = np.asarray(self.group)
    return np.concatenate([np.flatnonzero(group == g) for g in groups]).astype(np.int64)


def pack_minibatch(rows: Rows, idx, pad_id: int, *, multiple: int = 64, columns=()) -> dict:
  """Right-padded ``[prompt | response | pad]`` arrays for the rows ``idx``: the shared
  fields, and the method ``columns`` (a loss batch's ``ROW_COLUMNS``).

  ``resp_mask`` marks the response tokens whose log-probs the loss uses; rows
  with ``keep == False`` get an all-zero mask, which removes them from every
  sum and count of the loss.
  """
  idx = list(idx)
  prompts, responses = [rows.prompt_ids[i] for i in idx], [rows.response_ids[i] for i in idx]
  t = -(-max([len(p) + len(r) for p, r in zip(prompts, responses)] + [1]) // multiple) * multiple

  def right_padded(seqs, fill=0, dtype=np.float32):  # a row each
    return sequence_packing.lay_out(seqs, [[j] for j in range(len(idx))], t, len(idx),
                                    fill=fill, dtype=dtype)

  def on_response(values):  # per row, 0 over the prompt, then its values (0 for None)
    return right_padded([np.r_[np.zeros(len(p)), np.zeros(len(r)) if v is None else v]
                         for p, r, v in zip(prompts, responses, values)])[0]

  ids, seg, _, _ = right_padded([p + r for p, r in zip(prompts, responses)], pad_id,
                                TOKEN_FIELDS["ids"])
  resp = on_response([np.full(len(r), float(rows.keep[i])) for i, r in zip(idx, responses)])
  old = on_response([rows.old_logp[i] for i in idx])
  ref = on_response([rows.ref_logp[i] for i in idx])
  attn = seg > 0
  col = lambda name, dtype: np.asarray([getattr(rows, name)[i] for i in idx], dtype)
  kind = col("kind", np.int32)
  return {
      "ids": ids, "attn": attn, "resp_mask": resp, "old_logp": old, "ref_logp": ref,
      "adv": col("adv", np.float32), "weight": col("weight", np.float32),
      "grafted": col("grafted", np.float32), "ppo": (kind == KIND_PPO).astype(np.float32),
      "sgt": (kind == KIND_SGT).astype(np.float32),
      **{c.name: np.asarray([c.value(rows, i) for i in idx], c.dtype) for c in columns},
  }


def field_dtypes(batch_type) -> dict:
  """The dtype of each field of a loss batch type: shared, or its method's column."""
  own = {c.name: c.dtype for c in getattr(batch_type, "ROW_COLUMNS", ())}
  return {k: {**TOKEN_FIELDS, **ROW_FIELDS, **own}[k] for k in batch_type.__dataclass_fields__}


def typed_batch(batch_type, rows: Rows, idx, pad_id: int, *, multiple: int = 64):
  """`pack_minibatch`'s arrays for the rows ``idx``, only the fields ``batch_type`` (a
  method's loss batch, a ``flax.struct`` dataclass) has."""
  packed = pack_minibatch(rows, idx, pad_id, multiple=multiple,
                          columns=getattr(batch_type, "ROW_COLUMNS", ()))
  return batch_type(**{k: packed[k] for k in batch_type.__dataclass_fields__})
