"""One training step of GRAFT or a baseline: rollouts -> rewards -> advantages -> exchange -> updates.

``train_step`` is the same for every method: collect -> score ->
``method.build_rows`` -> updates; what differs (peers, rows, loss, minibatch
order, state) is the method's (``graft_jax.train.methods``).
"""

from __future__ import annotations

import time

import jax
import numpy as np

from graft_jax import core
from graft_jax.train import methods, microbatch
from graft_jax.models.logprobs import bucket_length
from graft_jax.train.collect import collect
from graft_jax.train.deferred_old_logp import score_deferred
from graft_jax.train.update_rows import pack_minibatch


def old_logp_in_update(cfg, g: int) -> bool:
  """Whether the update's own forward pass stands in for the old-log-prob pass
  (``Method.old_logp_in_update``)."""
  return methods.make(cfg).old_logp_in_update(g)


def loss_spec(cfg, g: int | None = None):
  """The configured method's ``PpoLoss`` / ``HacpoLoss`` for a step of ``g`` prompts."""
  return methods.make(cfg).loss(cfg.prompts_per_step if g is None else g)


# Read from every update, including one whose rows were all silent (it ran nothing).
_EVERY_UPDATE = ("grad_norm",) + microbatch.ROW_COUNTS


def run_updates(policy, rows, g: int, cfg, key, method=None) -> dict:
  """PPO epochs over minibatches of whole groups, in the method's order.

  Returns the mean of each minibatch metric over the updates, the own / grafted
  clip fractions pooled over all their tokens, and ``minibatch_updates``.
  """
  method = methods.make(cfg) if method is None else method
  grafted_G = np.zeros(g, bool)
  for q, graft in zip(rows.group, rows.grafted):
    grafted_G[q] |= graft
  mbs = method.num_minibatches(g)
  spec = method.loss(g)
  cap = cfg.max_prompt_len + cfg.max_response_len
  params, opt_state = policy.params, policy.opt_state
  per_update = []
  for epoch in range(cfg.ppo_epochs):
    perm = np.asarray(core.order_minibatches(grafted_G, mbs, order=method.order(),
                                             key=jax.random.fold_in(key, epoch)))
    for groups in perm.reshape(mbs, -1):
      idx = rows.rows_of_groups(groups)
      longest = max(len(rows.prompt_ids[i]) + len(rows.response_ids[i]) for i in idx)
      # A bucketed length (a multiple of it is itself), so steps reuse the program.
      batch = pack_minibatch(rows, idx, policy.pad_id, multiple=bucket_length(longest, cap))
      params, opt_state, m = microbatch.update(policy, params, opt_state, batch,
                                               np.int32(len(per_update)), spec,
                                               micro_batch_tokens=cfg.micro_batch_tokens,
                                               pack_by_length=cfg.pack_by_length,
                                               skip_silent=cfg.skip_silent_rows,
                                               streams=cfg.update_streams)
      per_update.append(m)  # read once at the end: packing the next minibatch overlaps this one
  policy.set_params(params, opt_state)
  updates, sums, ran = len(per_update), {}, 0
  per_update = jax.device_get(per_update)
  for m in per_update:  # an update whose rows were all silent ran no micro-batch
    ran += m.get("rows_run", 1) > 0
    for k, v in m.items():
      if m.get("rows_run", 1) > 0 or microbatch.summed_metric(k) or k in _EVERY_UPDATE:
        sums[k] = sums.get(k, 0.0) + float(v)
  out = {k: v / (updates if microbatch.summed_metric(k) or k == "grad_norm" else max(ran, 1))
         for k, v in sums.items()
         if not k.endswith(("_tokens", "_clipped")) and k not in microbatch.ROW_COUNTS}
  out.update({k: sums[k] for k in microbatch.ROW_COUNTS if k in sums})  # totals over updates
  out.pop("logp_mismatch_sum", None)
  if "logp_mismatch_sum" in sums and ran:  # over every own token the updates ran; the largest
    out["logp_mismatch_mean"] = sums["logp_mismatch_sum"] / max(sums["logp_mismatch_tokens"], 1.0)
    out["logp_mismatch_max"] = max(float(m["logp_mismatch_max"]) for m in per_update
                                   if m.get("rows_run", 1) > 0)
  for side in ("own", "graft"):
    if f"{side}_tokens" in sums:
      out[f"clip_frac_{side}"] = (sums[f"{side}_clipped"] / sums[f"{side}_tokens"]
                                  if sums[f"{side}_tokens"] else float("nan"))
  out["minibatch_updates"] = updates
  out.update(getattr(policy.engine, "last_sync_metrics", {}))  # vLLM: sync times, probe gap
  return out


def rollout_metrics(roll) -> dict:
  """Reward and length statistics, and the sampler / old-policy log-prob gap (which the
  update measures itself when it computes the old log-probs, ``old_logp_in_update``,
  and `score_deferred` over the rows it scores, ``old_logp_deferred``)."""
  k, n = roll.k_G, roll.n
  lengths = roll.batch.lengths_B
  out = {"reward_mean": float(roll.rewards_GxN.mean()), "all_fail": float((k == 0).mean()),
         "all_pass": float((k == n).mean()), "response_len": float(lengths.mean()),
         "truncated": float(roll.batch.truncated_B.mean())}
  if not (roll.old_logp_from_update or roll.old_logp_deferred):  # else measured later
    gen = np.concatenate([roll.batch.logp_BxL[b, :len(x)] for b, x in enumerate(roll.old_logp)] + [[]])
    old = np.concatenate(list(roll.old_logp) + [[]])
    gap = np.abs(gen - old) if gen.size == old.size and gen.size else np.zeros(1)
    out.update(logp_mismatch_mean=float(gap.mean()), logp_mismatch_max=float(gap.max()))
  return out


def train_step(cfg, policies: dict, problems, reward_fn, step: int, key, *,
               method=None, epoch: int = 0) -> tuple[dict, dict]:
  """Runs one step; returns (metrics, rollouts by policy name) for logging.

  ``policies`` maps names to ``Policy``; ``method`` (``methods.make(cfg)`` by
  default; a run keeps one across steps, with its state) picks which of them
  train, their peers and their rows. ``epoch`` is the pass over the prompts
  (replay reads the logged occurrence of that pass).
  """
  method = methods.make(cfg) if method is None else method
  timings: dict[str, float] = {}
  rolls = {}
  in_update = method.old_logp_in_update(len(problems))
  deferred = method.old_logp_deferred(len(problems))
  for i, name in enumerate(method.trained(list(policies))):
    seed = int(jax.random.randint(jax.random.fold_in(key, 1000 + i), (), 0, 2 ** 31 - 1))
    rolls[name] = collect(policies[name], problems, cfg, reward_fn, seed, timings,
                          old_logp_in_update=in_update, old_logp_deferred=deferred)
  t0 = time.perf_counter()
  peers = method.peers(rolls, problems, epoch)
  timings["peers_s"] = time.perf_counter() - t0

  metrics: dict = {"time": timings}
  for name, roll in rolls.items():
    metrics[name] = rollout_metrics(roll)
    metrics[name]["reward_stats"] = {k: v for k, v in vars(roll.reward_stats).items()
                                     if isinstance(v, (int, float))} if roll.reward_stats else {}

  t0 = time.perf_counter()
  built = method.build_rows(policies, rolls, peers, key)
  for name, (_, stats) in built.items():
    if stats is not None:
      metrics[name]["exchange"] = stats.metrics()
  metrics.update(method.step_metrics(built))
  timings["exchange_s"] = time.perf_counter() - t0
  if deferred:  # before any update: the behavior policy's parameters
    spec = method.loss(len(problems))
    for name, (rows, _) in built.items():
      t0 = time.perf_counter()
      metrics[name].update(score_deferred(policies[name], rows, spec, cfg))
      timings[f"{name}/old_logp_s"] += time.perf_counter() - t0

  for i, (name, (rows, _)) in enumerate(built.items()):
    t0 = time.perf_counter()
    update = run_updates(policies[name], rows, len(problems), cfg,
                         jax.random.fold_in(key, 3000 + i), method)
    timings[f"{name}/update_s"] = time.perf_counter() - t0
    for k in ("logp_mismatch_mean", "logp_mismatch_max"):  # measured by the update itself
      if k in update:
        metrics[name][k] = update.pop(k)
    metrics[name]["update"] = update
  return metrics, rolls
