"""One model's own rollouts for the step's prompts: sample, decode, score, advantages, old log-probs."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from graft_jax import core
from graft_jax.rollout import RolloutBatch, SamplingParams
from graft_jax.train.scoring import mean_or_nan


@dataclasses.dataclass
class Rollout:
  """A model's group of n responses per prompt, with everything the exchange needs.

  Rows are ``q * n + j``. ``old_logp`` is in the model's own tokenization
  (the sampler's, or teacher-forced under the pre-update params).
  """

  name: str
  batch: RolloutBatch
  prompt_ids: list          # per prompt, token ids
  response_ids: list        # per row
  texts: list               # per row
  rewards_GxN: np.ndarray
  adv_GxN: np.ndarray
  old_logp: list            # per row, float32 array over the response tokens
  gen_mean_logp_B: np.ndarray
  reward_stats: object = None
  # Set when the peer grafted from these responses: its gate record per row
  # (``exchange.peer_gate_columns``), stored in this model's peer log.
  peer_gate: dict | None = None
  # True while ``old_logp`` holds the sampler's log-probs standing in for the
  # teacher-forced ones (`graft_jax.train.old_logprobs`).
  needs_old_logp: bool = False

  @property
  def n(self) -> int:
    return self.batch.n

  @property
  def k_G(self) -> np.ndarray:
    return self.rewards_GxN.sum(axis=1).astype(np.int32)

  @property
  def old_mean_logp_B(self) -> np.ndarray:
    if self.needs_old_logp:
      raise ValueError(f"{self.name}'s old log-probs are the sampler's placeholders: a "
                       "method that reads them while it builds rows scores them first "
                       "(old_logprobs.score_rollout)")
    return np.array([mean_or_nan(x) for x in self.old_logp], np.float32)


def sampling_params(cfg, seed: int) -> SamplingParams:
  return SamplingParams(max_new_tokens=cfg.max_response_len, temperature=cfg.rollout.temperature,
                        top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k, seed=seed)


def rollout_from_batch(policy, problems, batch: RolloutBatch, prompt_ids, reward_fn, cfg,
                       timings: dict | None = None) -> Rollout:
  """Decodes, scores and computes advantages for a batch. Its old log-probs are the
  sampler's: the old ones with ``old_logp_source='sampler'``, else placeholders for
  the teacher-forced ones (`graft_jax.train.old_logprobs`)."""
  g, n = len(problems), batch.n
  timings = {} if timings is None else timings
  t0 = time.perf_counter()
  response_ids = [batch.response_ids(b) for b in range(g * n)]
  texts = [policy.decode(ids) for ids in response_ids]
  golds = [problems[b // n].answer for b in range(g * n)]
  rewards, stats = reward_fn(texts, golds)
  timings[f"{policy.name}/reward_s"] = time.perf_counter() - t0
  rewards_GxN = np.asarray(rewards, np.float32).reshape(g, n)
  adv_GxN = np.asarray(core.group_advantages(rewards_GxN, scale_by_std=cfg.scale_by_std))
  gen_logp = [batch.logp_BxL[b, :len(response_ids[b])] for b in range(g * n)]
  gen_mean = np.array([mean_or_nan(x) for x in gen_logp], np.float32)
  return Rollout(policy.name, batch, prompt_ids, response_ids, texts, rewards_GxN, adv_GxN,
                 gen_logp, gen_mean, stats,
                 needs_old_logp=cfg.old_logp_source == "teacher_forced")


def collect(policy, problems, cfg, reward_fn, seed: int, timings: dict) -> Rollout:
  """Samples n responses per problem with the policy's engine and scores them."""
  prompt_ids = [policy.prompt_ids(p.problem) for p in problems]
  t0 = time.perf_counter()
  batch = policy.engine.generate(prompt_ids, cfg.n, sampling_params(cfg, seed))
  timings[f"{policy.name}/sample_s"] = time.perf_counter() - t0
  return rollout_from_batch(policy, problems, batch, prompt_ids, reward_fn, cfg, timings=timings)
