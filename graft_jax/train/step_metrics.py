"""A training step's metrics from what its phases returned: rollouts, rows, old log-probs, updates."""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from jax import monitoring

from graft_jax.train.update import summed_metric

# Host counts each update adds to its metrics: the rows left out and the rows run.
ROW_COUNTS = ("silent_rows", "rows_run")
# Read from every update, including one whose rows were all silent (it ran nothing).
_EVERY_UPDATE = ("grad_norm",) + ROW_COUNTS
_GAP = ("logp_mismatch_sum", "logp_mismatch_tokens", "logp_mismatch_max")
# The rows the updates ran over: their tokens and squared lengths (graft_jax.train.cost).
_SEQ = ("seq_tokens", "seq_tokens_sq_sum")


_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def compilations():
  """``{"count", "seconds"}`` of the XLA compilations while the block runs (a step's
  compile phase: the first step's programs, and any new shape later)."""
  out = {"count": 0, "seconds": 0.0}

  def listen(event, seconds, **_):
    if event == _COMPILE_EVENT:
      out["count"] += 1
      out["seconds"] += seconds
  monitoring.register_event_duration_secs_listener(listen)
  try:
    yield out
  finally:
    monitoring.unregister_event_duration_listener(listen)


def rollout_metrics(roll) -> dict:
  """Reward and length statistics of one model's rollouts, and its reward's own."""
  k, n = roll.k_G, roll.n
  out = {"reward_mean": float(roll.rewards_GxN.mean()), "all_fail": float((k == 0).mean()),
         "all_pass": float((k == n).mean()), "response_len": float(roll.batch.lengths_B.mean()),
         "truncated": float(roll.batch.truncated_B.mean())}
  out["reward_stats"] = {k: v for k, v in vars(roll.reward_stats).items()
                         if isinstance(v, (int, float))} if roll.reward_stats else {}
  return out


def built_metrics(built) -> dict:
  """Per receiver, what its exchange did (receivers with a peer)."""
  return {name: {"exchange": stats.metrics()} for name, (_, stats) in built.items()
          if stats is not None}


def one_update(parts: list[dict]) -> dict:
  """One update's metrics from its calls' (host values): maxima by maximum, the rest
  added (each call's fractions are already weighted by its share of loss units)."""
  keys = dict.fromkeys(k for p in parts for k in p)
  return {k: functools.reduce(max if k.endswith("_max") else lambda a, b: a + b,
                              [float(p[k]) for p in parts if k in p]) for k in keys}


def update_metrics(per_update: list[list[dict]]) -> dict:
  """The updates of one step: the mean of each metric over the updates (fractions over
  those that ran a row), the row counts and the sampler gap's sums and max over all
  of them, the own / grafted clip fractions pooled over their tokens, the tokens the
  updates ran over (``seq_tokens``, ``seq_tokens_sq_sum``), and ``minibatch_updates``."""
  updates = [one_update(parts) for parts in per_update]
  ran = [m for m in updates if m["rows_run"] > 0]
  sums = {}
  for m in updates:
    for k, v in m.items():
      if m["rows_run"] > 0 or summed_metric(k) or k in _EVERY_UPDATE:
        sums[k] = sums.get(k, 0.0) + v
  out = {k: v / (len(updates) if summed_metric(k) or k == "grad_norm" else max(len(ran), 1))
         for k, v in sums.items() if not k.endswith(("_tokens", "_clipped", "_sum"))
         and k not in ROW_COUNTS and k not in _GAP}
  out.update({k: sums[k] for k in ROW_COUNTS + _GAP[:2] + _SEQ if k in sums})
  if any("logp_mismatch_max" in m for m in ran):
    out["logp_mismatch_max"] = max(m["logp_mismatch_max"] for m in ran if "logp_mismatch_max" in m)
  for side in ("own", "graft"):
    if f"{side}_tokens" in sums:
      out[f"clip_frac_{side}"] = (sums[f"{side}_clipped"] / sums[f"{side}_tokens"]
                                  if sums[f"{side}_tokens"] else float("nan"))
  out["minibatch_updates"] = len(updates)
  return out


def logp_mismatch(*measures: dict) -> dict:
  """The sampler / old-policy log-prob gap pooled over the tokens each measure covered
  (the old-log-prob pass and the update's own forward, which pop their sums): its
  mean and max, none where no token was measured."""
  tokens = sum(m.pop("logp_mismatch_tokens", 0.0) for m in measures)
  total = sum(m.pop("logp_mismatch_sum", 0.0) for m in measures)
  most = max(m.pop("logp_mismatch_max", 0.0) for m in measures)
  return {"logp_mismatch_mean": total / tokens, "logp_mismatch_max": most} if tokens else {}
