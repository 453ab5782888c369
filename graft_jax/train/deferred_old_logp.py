"""The old-log-prob pass after the rows are built: only the own rows with a loss term.

Where ``Method.old_logp_deferred`` holds, `collect` leaves the sampler's
log-probs in each own row as a placeholder (``Rows.old_logp_deferred``). Before
the first update, with the behavior policy's parameters still in place,
`score_deferred` scores the placeholder rows that have a loss term
(`graft_jax.train.microbatch.has_signal`) and puts pi_old(o_t) in their place.
The others are silent rows: the update leaves them out
(``skip_silent_rows`` with packed micro-batches), so their old log-probs are
never read. Under GRPO on the toy most own rows are silent (all-fail and
all-pass groups), so most of the pass goes.
"""

from __future__ import annotations

import numpy as np

from graft_jax.train import microbatch
from graft_jax.train.update_rows import KIND_PPO, KIND_SGT, Rows
from graft_jax.train.scoring import mean_or_nan, score_rows


def rows_to_score(rows: Rows, spec) -> np.ndarray:
  """Indices of the rows whose old log-probs are placeholders and that have a loss
  term: kept, with response tokens, and a signal under ``spec``."""
  kind_R = np.asarray(rows.kind, np.int32)
  signal_R = microbatch.has_signal(kind_R == KIND_PPO, kind_R == KIND_SGT,
                                   np.asarray(rows.adv, np.float32),
                                   np.asarray(rows.weight, np.float32), spec)
  return np.flatnonzero(np.asarray(rows.old_logp_deferred, bool)
                        & np.asarray(rows.keep, bool) & signal_R)


def score_deferred(policy, rows: Rows, spec, cfg) -> dict:
  """Scores `rows_to_score` under the policy's current (behavior) parameters, in
  place: their ``old_logp`` and ``src_mean_logp``. Returns how many rows were
  scored and left silent, and the sampler / old-policy gap over the scored
  tokens (``logp_mismatch_mean``, ``logp_mismatch_max``; with no row scored they
  read 0 beside ``old_logp_rows_scored`` = 0, as the update's fractions do beside
  ``rows_run`` = 0)."""
  idx = rows_to_score(rows, spec)
  out = {"old_logp_rows_scored": len(idx),
         "old_logp_rows_silent": int(np.sum(rows.old_logp_deferred)) - len(idx),
         "logp_mismatch_mean": 0.0, "logp_mismatch_max": 0.0}
  if not len(idx):
    return out
  # At the shapes scoring every placeholder row would take (its longest row's
  # bucket): the programs the step compiles do not vary with which rows are silent.
  longest = max(len(rows.prompt_ids[i]) + len(rows.response_ids[i])
                for i in np.flatnonzero(rows.old_logp_deferred))
  logp = score_rows(policy.model, [rows.prompt_ids[i] for i in idx],
                    [rows.response_ids[i] for i in idx], policy.pad_id,
                    temperature=cfg.rollout.temperature,
                    length_cap=cfg.max_prompt_len + cfg.max_response_len, min_length=longest)
  gaps = []
  for i, old in zip(idx, logp):
    gaps.append(np.abs(rows.old_logp[i] - old))  # the placeholder is the sampler's
    rows.old_logp[i] = np.asarray(old, np.float32)
    rows.src_mean_logp[i] = mean_or_nan(old)
    rows.old_logp_deferred[i] = False
  gap = np.concatenate(gaps)
  if gap.size:
    out.update(logp_mismatch_mean=float(gap.mean()), logp_mismatch_max=float(gap.max()))
  return out
