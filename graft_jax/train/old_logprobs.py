"""The PPO old log-probs pi_old(o_t) of the own rows, teacher-forced once the rows are built.

With ``old_logp_source='sampler'`` the sampler's log-probs are the old ones and
nothing here runs. Otherwise `collect` leaves the sampler's in each own row as a
placeholder (``old_logp_pending``) and, with the rows built and the minibatches
ordered, `score_own_rows` replaces them, under the parameters that sampled them,
where the update will read them: not in the update's first minibatch when every
row is visited once (``ppo_epochs`` = 1), whose forward still runs the behavior
policy's parameters and so is its own pi_old (its stop-gradient; TRL and verl
do the same with one update per batch of rollouts), and not in rows without a
loss term, which the update leaves out (``skip_silent_rows``). Peer rows carry
the receiver's teacher-forced log-probs from row building already (the gate
needs them). A method whose rows read old log-probs while they are built
(HACPO's source means) calls `score_rollout` itself.
"""

from __future__ import annotations

import numpy as np

from graft_jax.train.row_logprobs import score_rows
from graft_jax.train.update_rows import Rows, typed_batch


def from_update(cfg) -> bool:
  """Whether the first minibatch's old log-probs come from the update's own forward."""
  return cfg.old_logp_source == "teacher_forced" and cfg.ppo_epochs == 1


def fresh_rows(rows: Rows, idx, update_index: int, cfg) -> np.ndarray:
  """Per row of the update ``update_index`` over rows ``idx``, whether its old log-probs
  are the update's own forward: placeholders left in the first minibatch when
  `from_update` (the update fills them: ``graft_jax.train.update``)."""
  pending = np.asarray(rows.old_logp_pending, bool)[np.asarray(idx, np.int64)]
  return pending & (update_index == 0 and from_update(cfg))


def score_rollout(policy, roll, cfg) -> None:
  """Every row of a rollout whose old log-probs are placeholders, scored in place."""
  if not roll.old_logp_pending_B.any():
    return
  n = roll.n
  roll.old_logp = score_rows(policy.model, [roll.prompt_ids[b // n] for b in range(len(roll.old_logp))],
                             roll.response_ids, policy.pad_id, temperature=cfg.rollout.temperature,
                             length_cap=cfg.max_prompt_len + cfg.max_response_len)
  roll.old_logp_pending_B[:] = False


def rows_to_score(rows: Rows, method, first_minibatch, cfg) -> np.ndarray:
  """Indices of the placeholder rows the update will read: kept, with a loss term
  under the method (every row with ``skip_silent_rows`` off), outside
  ``first_minibatch`` when `from_update`."""
  read_R = np.asarray(rows.old_logp_pending, bool) & np.asarray(rows.keep, bool)
  if from_update(cfg):
    read_R[np.asarray(first_minibatch, np.int64)] = False
  if cfg.skip_silent_rows and read_R.any():
    read_R &= method.has_signal(typed_batch(method.loss_fn.Batch, rows, range(len(rows)), 0))
  return np.flatnonzero(read_R)


def score_own_rows(policy, rows: Rows, method, first_minibatch, cfg) -> dict:
  """Scores `rows_to_score` under the policy's current (behavior) parameters, in
  place: their ``old_logp``. Returns how many rows were
  scored, and the sampler / old-policy gap over their tokens as a sum, a count
  and a max (pooled with the update's own measure: `metrics.logp_mismatch`)."""
  idx = rows_to_score(rows, method, first_minibatch, cfg)
  out = {"old_logp_rows_scored": len(idx), "logp_mismatch_sum": 0.0,
         "logp_mismatch_tokens": 0.0, "logp_mismatch_max": 0.0}
  if not len(idx):
    return out
  # At the shapes scoring every placeholder row would take (its longest row's
  # bucket): the programs the step compiles do not vary with which rows are silent.
  longest = max(len(rows.prompt_ids[i]) + len(rows.response_ids[i])
                for i in np.flatnonzero(rows.old_logp_pending))
  logp = score_rows(policy.model, [rows.prompt_ids[i] for i in idx],
                    [rows.response_ids[i] for i in idx], policy.pad_id,
                    temperature=cfg.rollout.temperature,
                    length_cap=cfg.max_prompt_len + cfg.max_response_len, min_length=longest)
  gaps = []
  for i, old in zip(idx, logp):
    gaps.append(np.abs(rows.old_logp[i] - old))  # the placeholder is the sampler's
    rows.old_logp[i] = np.asarray(old, np.float32)
    rows.old_logp_pending[i] = False
  gap = np.concatenate(gaps)
  if gap.size:
    out.update(logp_mismatch_sum=float(gap.sum()), logp_mismatch_tokens=float(gap.size),
               logp_mismatch_max=float(gap.max()))
  return out
