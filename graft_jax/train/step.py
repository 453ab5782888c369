"""One training step of GRAFT or a baseline: rollouts -> rewards -> advantages -> exchange -> updates.

``train_step`` is the whole step for one or two policies; each method differs
only in how the receiver's rows are built (``graft_jax.train.exchange``).
"""

from __future__ import annotations

import time

import jax
import numpy as np

from graft_jax import core
from graft_jax.train import exchange, microbatch
from graft_jax.models.logprobs import bucket_length
from graft_jax.train.collect import collect
from graft_jax.train.rows import pack_minibatch
from graft_jax.train.scoring import score_rows
from graft_jax.train.update import LossSpec


def old_logp_in_update(cfg, g: int) -> bool:
  """Whether the update's own forward pass stands in for the old-log-prob pass.

  With one minibatch and one PPO epoch the parameters being differentiated
  are the behavior policy's, so pi_old(o_t) is the stop-gradient of the same
  forward (as TRL and verl do with one update per batch of rollouts): no
  separate teacher-forced pass over the own rows. Grafted rows are still
  scored before the update, for the gate. HACPO reads its rows' old means
  before the update, and ``old_logp_source='sampler'`` asks for the sampler's.
  """
  return (cfg.old_logp_source == "teacher_forced" and cfg.method != "hacpo"
          and cfg.ppo_epochs == 1 and num_minibatches(cfg, g) == 1)


def loss_spec(cfg, g: int | None = None) -> LossSpec:
  if cfg.method == "hacpo":
    h = cfg.hacpo
    return LossSpec(kind="hacpo", temperature=cfg.rollout.temperature,
                    hacpo_self_clip=tuple(h.self_clip), hacpo_cross_clip=h.cross_clip,
                    hacpo_cross_step=h.cross_clip_step, kl_coef=h.kl_coef)
  ratio_level = cfg.graft.ratio_level if cfg.method in ("graft", "replay") else "token"
  return LossSpec(kind="ppo", clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                  ratio_level=ratio_level, temperature=cfg.rollout.temperature,
                  sgt_coef=cfg.sgt.coef if cfg.method == "sgt" else 0.0,
                  old_from_current=old_logp_in_update(
                      cfg, cfg.prompts_per_step if g is None else g))


def num_minibatches(cfg, g: int) -> int:
  if cfg.method == "hacpo":
    return max(1, g // min(cfg.hacpo.minibatch_prompts, g))
  return cfg.num_minibatches


def run_updates(policy, rows, g: int, cfg, key) -> dict:
  """PPO epochs over minibatches of whole groups, in the configured order."""
  grafted_G = np.zeros(g, bool)
  for q, graft in zip(rows.group, rows.grafted):
    grafted_G[q] |= graft
  mbs = num_minibatches(cfg, g)
  order = cfg.graft.order if cfg.method in ("graft", "replay") else "peer_last"
  spec = loss_spec(cfg, g)
  cap = cfg.max_prompt_len + cfg.max_response_len
  params, opt_state = policy.params, policy.opt_state
  per_update = []
  for epoch in range(cfg.ppo_epochs):
    perm = np.asarray(core.order_minibatches(grafted_G, mbs, order=order,
                                             key=jax.random.fold_in(key, epoch)))
    for groups in perm.reshape(mbs, -1):
      idx = rows.rows_of_groups(groups)
      longest = max(len(rows.prompt_ids[i]) + len(rows.response_ids[i]) for i in idx)
      # A bucketed length (a multiple of it is itself), so steps reuse the program.
      batch = pack_minibatch(rows, idx, policy.pad_id, multiple=bucket_length(longest, cap))
      params, opt_state, m = microbatch.update(policy, params, opt_state, batch,
                                               np.int32(len(per_update)), spec,
                                               micro_batch_tokens=cfg.micro_batch_tokens)
      per_update.append(m)  # read once at the end: packing the next minibatch overlaps this one
  policy.set_params(params, opt_state)
  updates, sums = len(per_update), {}
  for m in jax.device_get(per_update):
    for k, v in m.items():
      sums[k] = sums.get(k, 0.0) + float(v)
  out = {k: v / updates for k, v in sums.items() if not k.endswith(("_tokens", "_clipped"))}
  for side in ("own", "graft"):
    if f"{side}_tokens" in sums:
      out[f"clip_frac_{side}"] = (sums[f"{side}_clipped"] / sums[f"{side}_tokens"]
                                  if sums[f"{side}_tokens"] else float("nan"))
  out["minibatch_updates"] = updates
  out.update(getattr(policy.engine, "last_sync_metrics", {}))  # vLLM: sync times, probe gap
  return out


def rollout_metrics(roll) -> dict:
  """Reward and length statistics, and the sampler / old-policy log-prob gap (which the
  update measures itself when it computes the old log-probs, ``old_logp_in_update``)."""
  k, n = roll.k_G, roll.n
  lengths = roll.batch.lengths_B
  out = {"reward_mean": float(roll.rewards_GxN.mean()), "all_fail": float((k == 0).mean()),
         "all_pass": float((k == n).mean()), "response_len": float(lengths.mean()),
         "truncated": float(roll.batch.truncated_B.mean())}
  if not roll.old_logp_from_update:
    gen = np.concatenate([roll.batch.logp_BxL[b, :len(x)] for b, x in enumerate(roll.old_logp)] + [[]])
    old = np.concatenate(list(roll.old_logp) + [[]])
    gap = np.abs(gen - old) if gen.size == old.size and gen.size else np.zeros(1)
    out.update(logp_mismatch_mean=float(gap.mean()), logp_mismatch_max=float(gap.max()))
  return out


def build_rows(cfg, recv_policy, recv, src, receives_G, key, capability, counts):
  """The receiver's rows for the configured method."""
  if cfg.method in ("graft", "replay"):
    return exchange.graft_rows(recv_policy, recv, src, receives_G, cfg, counts)
  if cfg.method == "sgt":
    return exchange.sgt_rows(recv_policy, recv, src, key, cfg, counts)
  if cfg.method == "hacpo":
    cap = capability.ratio(src.name, recv.name) if capability is not None else 1.0
    rows = exchange.hacpo_rows(recv_policy, recv, src, cap, cfg, counts)
    rows.ref_logp = score_rows(_ref_model(recv_policy),
                               rows.prompt_ids, rows.response_ids, recv_policy.pad_id,
                               temperature=cfg.rollout.temperature,
                               length_cap=cfg.max_prompt_len + cfg.max_response_len)
    return rows
  raise ValueError(f"method {cfg.method!r} has no exchange")


def _ref_model(policy):
  from flax import nnx
  return nnx.merge(policy.graphdef, policy.ref_params)


def own_rows(roll):
  rows = exchange.Rows()
  for q in range(roll.rewards_GxN.shape[0]):
    exchange.add_own_group(rows, roll, q)
  return rows


def train_step(cfg, policies: dict, problems, reward_fn, step: int, key, *,
               capability=None, replay_source=None) -> tuple[dict, dict]:
  """Runs one step; returns (metrics, rollouts by policy name) for logging.

  ``policies`` maps names to ``Policy``; GRPO may have one or two (two run
  independently, which also yields the complementarity figures). ``replay``
  trains the first policy only, with ``replay_source(problems) -> Rollout``
  standing in for the peer.
  """
  timings: dict[str, float] = {}
  names = list(policies)
  rolls = {}
  in_update = old_logp_in_update(cfg, len(problems))
  for i, name in enumerate(names):
    if cfg.method == "replay" and i > 0:
      break
    seed = int(jax.random.randint(jax.random.fold_in(key, 1000 + i), (), 0, 2 ** 31 - 1))
    rolls[name] = collect(policies[name], problems, cfg, reward_fn, seed, timings,
                          old_logp_in_update=in_update)
  if cfg.method == "replay":
    t0 = time.perf_counter()
    peer = replay_source(problems)
    timings["replay_load_s"] = time.perf_counter() - t0
    pairs = [(names[0], peer)]
  else:
    pairs = [(a, rolls[b]) for a, b in zip(names, names[::-1])] if len(names) == 2 else []

  metrics: dict = {"time": timings}
  for name, roll in rolls.items():
    metrics[name] = rollout_metrics(roll)
    metrics[name]["reward_stats"] = {k: v for k, v in vars(roll.reward_stats).items()
                                     if isinstance(v, (int, float))} if roll.reward_stats else {}
  if capability is not None:
    capability.update({name: roll.rewards_GxN for name, roll in rolls.items()})

  receives = {}
  if cfg.method in ("graft", "replay") and pairs:
    if cfg.method == "graft":
      a, b = names
      a_recv, b_recv = (np.asarray(x) for x in core.select_exchange(
          rolls[a].k_G, rolls[b].k_G, cfg.n, balance=cfg.graft.balance))
      receives = {a: a_recv, b: b_recv}
    else:
      peer = pairs[0][1]
      a_recv, _ = core.select_exchange(rolls[names[0]].k_G, peer.k_G, cfg.n, balance=False)
      receives = {names[0]: np.asarray(a_recv)}

  rows_by_name = {}
  t0 = time.perf_counter()
  for i, (name, src) in enumerate(pairs):
    recv = rolls[name]
    counts = {"complementarity": exchange.complementarity(recv.k_G, src.k_G),
              "candidates": int(np.asarray(core.exchange_candidates(recv.k_G, src.k_G, cfg.n)).sum())}
    r = receives.get(name)
    if r is not None:
      counts["grafted_groups"] = int(r.sum())
    if cfg.method != "grpo":
      rows_by_name[name] = build_rows(cfg, policies[name], recv, src, r,
                                      jax.random.fold_in(key, 2000 + i), capability, counts)
    s_values = np.asarray(counts.pop("s_values", []))
    if s_values.size:
      counts.update({f"s_p{p}": float(np.percentile(s_values, p)) for p in (10, 50, 90)})
    metrics[name]["exchange"] = counts
  if cfg.method == "graft" and pairs:
    metrics["m"] = int(min(metrics[n_]["exchange"]["candidates"] for n_ in names))
  timings["exchange_s"] = time.perf_counter() - t0

  for i, name in enumerate(rolls):
    rows = rows_by_name.get(name) or own_rows(rolls[name])
    t0 = time.perf_counter()
    update = run_updates(policies[name], rows, len(problems), cfg,
                         jax.random.fold_in(key, 3000 + i))
    timings[f"{name}/update_s"] = time.perf_counter() - t0
    for k in ("logp_mismatch_mean", "logp_mismatch_max"):  # measured by the update itself
      if k in update:
        metrics[name][k] = update.pop(k)
    metrics[name]["update"] = update
  return metrics, rolls
