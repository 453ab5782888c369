"""One training step of GRAFT or a baseline: collect -> build rows -> old log-probs -> updates.

``train_step`` is the same for every method; what differs (peers, rows, loss,
minibatch order, state) is the method's (``graft_jax.train.methods``).
"""

from __future__ import annotations

import time

import jax
import numpy as np

from graft_jax import core
from graft_jax.models.logprobs import bucket_length
from graft_jax.outputs import finite_guard, step_cost as cost, step_metrics
from graft_jax.train import methods, old_logprobs, update
from graft_jax.train.collect import check_successes, collect_all
from graft_jax.train.update_rows import typed_batch


def minibatches(rows, g: int, method, epochs: int, key) -> list[np.ndarray]:
  """The row indices of each update: per epoch, minibatches of whole groups in the
  method's order (``core.order_minibatches``)."""
  grafted_G = np.zeros(g, bool)
  for q, graft in zip(rows.group, rows.grafted):
    grafted_G[q] |= graft
  mbs = method.num_minibatches(g)
  return [rows.rows_of_groups(groups) for epoch in range(epochs)
          for groups in np.asarray(core.order_minibatches(
              grafted_G, mbs, order=method.order(),
              key=jax.random.fold_in(key, epoch))).reshape(mbs, -1)]


def run_updates(policy, rows, order: list[np.ndarray], cfg, method) -> dict:
  """One optimizer step per minibatch of ``order``; the policy then holds the new
  parameters. Returns `step_metrics.update_metrics`."""
  cap = cfg.max_prompt_len + cfg.max_response_len
  loss, width = method.loss_fn, bucket_length(cap, cap)  # the run's padded length budget
  params, opt_state = policy.params, policy.opt_state
  per_update = []
  for i, idx in enumerate(order):
    longest = max(len(rows.prompt_ids[r]) + len(rows.response_ids[r]) for r in idx)
    # A longer row (a peer's text re-tokenized can outgrow the budget) takes its bucket.
    batch = typed_batch(loss.Batch, rows, idx, policy.pad_id,
                        multiple=bucket_length(max(longest, width), cap))
    params, opt_state, parts = update.update(
        policy, params, opt_state, batch, loss, np.int32(i),
        micro_batch_tokens=cfg.perf.micro_batch_tokens, width=width,
        skip_silent=cfg.skip_silent_rows, fresh_B=old_logprobs.fresh_rows(rows, idx, i, cfg),
        packed=cfg.perf.packed_update, skip_nonfinite=cfg.safety.nonfinite == "skip")
    per_update.append(parts)  # read once at the end: packing the next minibatch overlaps this one
  out = step_metrics.update_metrics(finite_guard.screen(policy.name, per_update, cfg))
  policy.set_params(params, opt_state)  # finite: a skipped update returned the state before it
  out.update(getattr(policy.engine, "last_sync_metrics", {}))  # vLLM: sync times, probe gap
  return out


def train_step(cfg, policies: dict, problems, reward_fn, step: int, key, *,
               method=None, epoch: int = 0) -> tuple[dict, dict]:
  """Runs one step; returns (metrics, rollouts by policy name) for logging.

  ``policies`` maps names to ``Policy``; ``method`` (``methods.make(cfg)`` by
  default; a run keeps one across steps, with its state) picks which of them
  train, their peers and their rows. ``epoch`` is the pass over the prompts
  (replay reads the logged occurrence of that pass).
  """
  with step_metrics.compilations() as compiled, finite_guard.naming_step(step):
    metrics, rolls = _train_step(cfg, policies, problems, reward_fn, key, method=method,
                                 epoch=epoch)
  metrics["time"]["compile_s"] = compiled["seconds"]
  metrics["time"]["compiles"] = compiled["count"]  # a count, beside its seconds
  return metrics, rolls


def _train_step(cfg, policies: dict, problems, reward_fn, key, *, method, epoch: int
                ) -> tuple[dict, dict]:
  method = methods.make(cfg) if method is None else method
  timings: dict[str, float] = {}
  trained = method.trained(list(policies))
  seeds = {name: int(jax.random.randint(jax.random.fold_in(key, 1000 + i), (), 0, 2 ** 31 - 1))
           for i, name in enumerate(trained)}
  rolls = collect_all({name: policies[name] for name in trained}, problems, cfg, reward_fn,
                      seeds, timings)
  finite_guard.check_rollouts(rolls)
  for roll in rolls.values() if method.counts_successes else ():
    check_successes(roll, cfg)
  t0 = time.perf_counter()
  peers = method.peers(rolls, problems, epoch)
  timings["peers_s"] = time.perf_counter() - t0

  t0 = time.perf_counter()
  with step_metrics.scoring_calls() as exchange_calls:  # the gate's peer rows, a method's own
    built = method.build_rows(policies, rolls, peers, key)
  timings["exchange_s"] = time.perf_counter() - t0
  metrics = {"time": timings, **method.step_metrics(built),
             "exchange_scoring": step_metrics.scoring_metrics(exchange_calls)}
  for name, roll in rolls.items():
    metrics[name] = step_metrics.rollout_metrics(roll)
    metrics[name].update(step_metrics.built_metrics(built).get(name, {}))

  cap = cfg.max_prompt_len + cfg.max_response_len
  for i, (name, (rows, _)) in enumerate(built.items()):
    order = minibatches(rows, len(problems), method, cfg.ppo_epochs,
                        jax.random.fold_in(key, 3000 + i))
    t0 = time.perf_counter()
    with step_metrics.scoring_calls() as old_logp_calls:
      scored = old_logprobs.score_own_rows(policies[name], rows, method, order[0], cfg)
    timings[f"{name}/old_logp_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    updates = run_updates(policies[name], rows, order, cfg, method)
    timings[f"{name}/update_s"] = time.perf_counter() - t0
    metrics[name].update(step_metrics.logp_mismatch(scored, updates),
                         old_logp_rows_scored=scored["old_logp_rows_scored"], update=updates,
                         old_logp=step_metrics.scoring_metrics(old_logp_calls),
                         packed_attention=policies[name].model.packed_attention(cap))
  metrics["cost"] = cost.step_cost(cfg, {n: policies[n] for n in rolls}, metrics)
  return metrics, rolls
