"""A training step's metrics from what its phases returned: rollouts, rows, old log-probs, updates."""

from __future__ import annotations

import contextlib
import dataclasses
import functools

from jax import monitoring

from graft_jax.rewards import RewardError
from graft_jax.outputs import metric_kinds as kinds


_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
# The `scoring_calls` blocks open now, innermost last: each collects every call's tokens.
_open_scoring: list[list[dict]] = []


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


@contextlib.contextmanager
def scoring_calls():
  """The tokens each teacher-forced scoring call (`graft_jax.train.row_logprobs`) computes
  while the block runs, one ``{computed_tokens, padding_tokens}`` of `metric_kinds.SUM`
  metrics per call, as the update declares its own: a step logs what each phase's
  scoring computed, however deep in the phase the calls are made (a method's row
  building scores the gate's peer rows itself). `scoring_metrics` sums them."""
  calls: list[dict] = []
  _open_scoring.append(calls)
  try:
    yield calls
  finally:
    _open_scoring.remove(calls)


def count_scoring_call(computed_tokens: int, real_tokens: int) -> None:
  """One scoring call's tokens, padding included, and its sequences' own, to every open
  `scoring_calls` block."""
  for calls in _open_scoring:
    calls.append(kinds.metrics(kinds.SUM, computed_tokens=float(computed_tokens),
                               padding_tokens=float(computed_tokens - real_tokens)))


def stats_dict(stats) -> dict:
  """A reward's ``stats`` as a dict: it may return None, a dict or a dataclass."""
  if stats is None:
    return {}
  if isinstance(stats, dict):
    return stats
  if dataclasses.is_dataclass(stats):
    return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}
  raise RewardError(f"a reward's stats must be None, a dict or a dataclass, got "
                    f"{type(stats).__name__}")


def rollout_metrics(roll) -> dict:
  """Reward and length statistics of one model's rollouts, its reward's own and its
  engine's (``engine``, where the engine measures its calls)."""
  k, n = roll.k_G, roll.n
  out = {"reward_mean": float(roll.rewards_GxN.mean()), "all_fail": float((k == 0).mean()),
         "all_pass": float((k == n).mean()), "response_len": float(roll.batch.lengths_B.mean()),
         "truncated": float(roll.batch.truncated_B.mean())}
  out["reward_stats"] = {k: v for k, v in stats_dict(roll.reward_stats).items()
                         if isinstance(v, (int, float))}
  if roll.batch.engine_metrics:
    out["engine"] = dict(roll.batch.engine_metrics)
  return out


def built_metrics(built) -> dict:
  """Per receiver, what its exchange did (receivers with a peer)."""
  return {name: {"exchange": stats.metrics()} for name, (_, stats) in built.items()
          if stats is not None}


def combined(parts: list[dict]) -> dict:
  """One update's `metric_kinds.Metric`s from its calls' (host values): maxima by
  maximum, the rest added (each call's fractions are already weighted by its share
  of loss units)."""
  keys = dict.fromkeys(k for p in parts for k in p)
  out = {}
  for k in keys:
    ms = [p[k] for p in parts if k in p]
    add = max if ms[0].reducer == kinds.MAX else lambda a, b: a + b
    out[k] = kinds.Metric(functools.reduce(add, [float(m.value) for m in ms]), ms[0].reducer)
  return out


def one_update(parts: list[dict]) -> dict:
  """One update's metrics from its calls, as plain numbers (`combined`)."""
  return {k: m.value for k, m in combined(parts).items()}


def update_metrics(per_update: list[list[dict]]) -> dict:
  """The updates of one step, each metric by its reducer (`metric_kinds`): means over
  all the updates, fractions over those that ran a row, sums over all of them, the
  max over those that ran; the own / grafted clip fractions pooled over their tokens;
  and ``minibatch_updates``."""
  updates = [combined(parts) for parts in per_update]
  ran = [m for m in updates if m["rows_run"].value > 0]
  out, pooled = {}, {}
  for k in dict.fromkeys(k for m in updates for k in m):
    reducer = next(m[k].reducer for m in updates if k in m)
    every = [m[k].value for m in updates if k in m]
    ran_values = [m[k].value for m in ran if k in m]
    if reducer == kinds.MEAN:
      out[k] = sum(every) / len(updates)
    elif reducer == kinds.SUM:
      out[k] = sum(every)
    elif reducer == kinds.POOLED:
      pooled[k] = sum(every)
    elif ran_values:
      out[k] = max(ran_values) if reducer == kinds.MAX else sum(ran_values) / len(ran)
  for side in ("own", "graft"):
    if f"{side}_tokens" in pooled:
      out[f"clip_frac_{side}"] = (pooled[f"{side}_clipped"] / pooled[f"{side}_tokens"]
                                  if pooled[f"{side}_tokens"] else float("nan"))
  out["minibatch_updates"] = len(updates)
  return out


def scoring_metrics(calls: list[dict]) -> dict:
  """What one phase's scoring calls computed (`scoring_calls`):
  their tokens, padding included, and the padding among them, each summed by its
  reducer, and how many calls; zeros when the phase scored nothing."""
  out = {"computed_tokens": 0.0, "padding_tokens": 0.0}
  out.update({k: m.value for k, m in combined(calls).items()})
  return {**out, "calls": len(calls)}


def logp_mismatch(*measures: dict) -> dict:
  """The sampler / old-policy log-prob gap pooled over the tokens each measure covered
  (the old-log-prob pass and the update's own forward, which pop their sums): its
  mean and max, none where no token was measured."""
  tokens = sum(m.pop("logp_mismatch_tokens", 0.0) for m in measures)
  total = sum(m.pop("logp_mismatch_sum", 0.0) for m in measures)
  most = max(m.pop("logp_mismatch_max", 0.0) for m in measures)
  return {"logp_mismatch_mean": total / tokens, "logp_mismatch_max": most} if tokens else {}
