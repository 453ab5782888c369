"""Stored-log replay: a peer's recorded rollouts stand in for a live peer, matched by prompt id."""

from __future__ import annotations

import numpy as np

from graft_jax import core
from graft_jax.rollout import RolloutBatch
from graft_jax.train.collect import Rollout, check_successes
from graft_jax.train.row_logprobs import mean_or_nan


class ReplaySource:
  """Builds the peer's ``Rollout`` for a step's problems from a ``PeerLogReader``.

  Rewards are re-verified against the gold answers (the log's own rewards are
  not trusted), and the source advantages are recomputed from them. When a
  prompt was logged more than once (several epochs), occurrence ``epoch`` is
  used (wrapping). A prompt missing from the log gets an all-fail group, so
  it is never a candidate; such prompts are counted in ``missing``.
  """

  def __init__(self, reader, reward_fn, cfg, name: str = "replay"):
    self.reader, self.reward_fn, self.cfg, self.name = reader, reward_fn, cfg, name
    self.missing = 0

  def __call__(self, problems, epoch: int = 0) -> Rollout:
    n = self.cfg.n
    texts, ids, logps, finished = [], [], [], []
    for p in problems:
      table = self.reader.lookup(p.id)
      steps = sorted(set(table.column("step").to_pylist())) if table.num_rows else []
      if not steps:
        self.missing += 1
        texts += [""] * n
        ids += [[]] * n
        logps += [[]] * n
        finished += [False] * n
        continue
      step = steps[epoch % len(steps)]
      rows = table.filter(np.asarray(table.column("step").to_pylist()) == step).to_pylist()
      if len(rows) != n:
        raise ValueError(f"peer log {self.reader.dir if hasattr(self.reader, 'dir') else ''}: "
                         f"prompt {p.id} at step {step} has {len(rows)} responses, config n={n}")
      for r in rows:
        texts.append(r["response"])
        ids.append(list(r["response_ids"]))
        logps.append(list(r["logprobs"]))
        finished.append(bool(r["finished"]))
    golds = [problems[b // n].answer for b in range(len(texts))]
    rewards, stats = self.reward_fn(texts, golds)
    rewards_GxN = np.asarray(rewards, np.float32).reshape(len(problems), n)
    rewards_GxN[[i for i in range(len(problems)) if not ids[i * n]]] = 0.0
    width = max([len(x) for x in ids] + [1])
    tok = np.zeros((len(ids), width), np.int32)
    mask = np.zeros((len(ids), width), bool)
    lp = np.zeros((len(ids), width), np.float32)
    for b, (x, l) in enumerate(zip(ids, logps)):
      tok[b, :len(x)], mask[b, :len(x)], lp[b, :len(l)] = x, True, l
    fin = np.asarray(finished, bool)
    batch = RolloutBatch(tok, mask, lp, fin, ~fin & mask.any(1),
                         np.repeat(np.arange(len(problems), dtype=np.int32), n), n)
    adv = np.asarray(core.group_advantages(rewards_GxN, scale_by_std=self.cfg.scale_by_std))
    gen_mean = np.array([mean_or_nan(l) for l in logps], np.float32)
    roll = Rollout(self.name, batch, None, ids, texts, rewards_GxN, adv,
                   [np.asarray(l, np.float32) for l in logps], gen_mean, stats,
                   success_threshold=self.cfg.reward.success_threshold)
    check_successes(roll, self.cfg)  # replay's selection counts the logged successes
    return roll
