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

import numpy as np

# A row's loss term: PPO's clipped token loss, SGT's NLL, HACPO's sequence loss.
KIND_PPO, KIND_SGT, KIND_HACPO = 0, 1, 2

# What `pack_minibatch` returns, with dtypes: per token (rows x length) and per row.
TOKEN_FIELDS = {"ids": np.int32, "attn": np.bool_, "resp_mask": np.float32,
                "old_logp": np.float32, "ref_logp": np.float32}
ROW_FIELDS = {"adv": np.float32, "weight": np.float32, "grafted": np.float32,
              "ppo": np.float32, "sgt": np.float32, "is_self": np.bool_,
              "src_mean_logp": np.float32, "cap_ratio": np.float32}


@dataclasses.dataclass
class Rows:
  """Column store of rows; ``group_R[r]`` is the prompt index (0..G-1)."""

  prompt_ids: list = dataclasses.field(default_factory=list)
  response_ids: list = dataclasses.field(default_factory=list)
  group: list = dataclasses.field(default_factory=list)
  adv: list = dataclasses.field(default_factory=list)
  weight: list = dataclasses.field(default_factory=list)
  keep: list = dataclasses.field(default_factory=list)
  grafted: list = dataclasses.field(default_factory=list)
  kind: list = dataclasses.field(default_factory=list)
  is_self: list = dataclasses.field(default_factory=list)
  src_mean_logp: list = dataclasses.field(default_factory=list)
  cap_ratio: list = dataclasses.field(default_factory=list)
  old_logp: list = dataclasses.field(default_factory=list)
  ref_logp: list = dataclasses.field(default_factory=list)
  # True where ``old_logp`` is the sampler's, standing in for the teacher-forced ones
  # (`graft_jax.train.old_logprobs` scores those the update reads; the update's first
  # forward is pi_old for those left in its first minibatch).
  old_logp_pending: list = dataclasses.field(default_factory=list)

  def add(self, prompt, response, group, *, adv=0.0, weight=1.0, keep=True, grafted=False,
          kind=KIND_PPO, is_self=True, src_mean_logp=0.0, cap_ratio=1.0, old_logp=None,
          old_logp_pending=False):
    self.prompt_ids.append(list(prompt))
    self.response_ids.append(list(response))
    self.group.append(int(group))
    self.adv.append(float(adv))
    self.weight.append(float(weight))
    self.keep.append(bool(keep) and len(response) > 0)
    self.grafted.append(bool(grafted))
    self.kind.append(int(kind))
    self.is_self.append(bool(is_self))
    self.src_mean_logp.append(float(src_mean_logp))
    self.cap_ratio.append(float(cap_ratio))
    self.old_logp.append(None if old_logp is None else np.asarray(old_logp, np.float32))
    self.ref_logp.append(None)
    self.old_logp_pending.append(bool(old_logp_pending))

  def __len__(self):
    return len(self.group)

  def rows_of_groups(self, groups) -> np.ndarray:
    """Row indices of the given groups, in the order the groups are listed."""
    group = np.asarray(self.group)
    return np.concatenate([np.flatnonzero(group == g) for g in groups]).astype(np.int64)


def pad_to(values, length: int, fill=0.0, dtype=np.float32) -> np.ndarray:
  out = np.full(length, fill, dtype)
  values = np.asarray(values, dtype)[:length]
  out[:len(values)] = values
  return out


def pack_minibatch(rows: Rows, idx, pad_id: int, *, multiple: int = 64) -> dict:
  """Right-padded ``[prompt | response | pad]`` arrays for the rows ``idx``.

  ``resp_mask`` marks the response tokens whose log-probs the loss uses; rows
  with ``keep == False`` get an all-zero mask, which removes them from every
  sum and count of the loss.
  """
  idx = list(idx)
  lens = [len(rows.prompt_ids[i]) + len(rows.response_ids[i]) for i in idx]
  t = -(-max(lens + [1]) // multiple) * multiple
  b = len(idx)
  ids = np.full((b, t), pad_id, TOKEN_FIELDS["ids"])
  attn, resp, old, ref = (np.zeros((b, t), TOKEN_FIELDS[k])
                          for k in ("attn", "resp_mask", "old_logp", "ref_logp"))
  for j, i in enumerate(idx):
    p, r = rows.prompt_ids[i], rows.response_ids[i]
    ids[j, :len(p) + len(r)] = p + r
    attn[j, :len(p) + len(r)] = True
    if rows.keep[i]:
      resp[j, len(p):len(p) + len(r)] = 1.0
    if rows.old_logp[i] is not None:
      old[j, len(p):len(p) + len(r)] = rows.old_logp[i]
    if rows.ref_logp[i] is not None:
      ref[j, len(p):len(p) + len(r)] = rows.ref_logp[i]
  col = lambda name, dtype: np.asarray([getattr(rows, name)[i] for i in idx], dtype)
  kind = col("kind", np.int32)
  return {
      "ids": ids, "attn": attn, "resp_mask": resp, "old_logp": old, "ref_logp": ref,
      "adv": col("adv", np.float32), "weight": col("weight", np.float32),
      "grafted": col("grafted", np.float32), "ppo": (kind == KIND_PPO).astype(np.float32),
      "sgt": (kind == KIND_SGT).astype(np.float32), "is_self": col("is_self", bool),
      "src_mean_logp": col("src_mean_logp", np.float32),
      "cap_ratio": col("cap_ratio", np.float32),
  }


def typed_batch(batch_type, rows: Rows, idx, pad_id: int, *, multiple: int = 64):
  """`pack_minibatch`'s arrays for the rows ``idx``, only the fields ``batch_type`` (a
  method's loss batch, a ``flax.struct`` dataclass) has."""
  packed = pack_minibatch(rows, idx, pad_id, multiple=multiple)
  return batch_type(**{k: packed[k] for k in batch_type.__dataclass_fields__})
