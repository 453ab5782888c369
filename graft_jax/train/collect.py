"""Each model's own rollouts for the step's prompts: sample, decode, score, advantages, old log-probs."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import time

import numpy as np

from graft_jax import core, distributed
from graft_jax.config.checks import ConfigError
from graft_jax.rewards import RewardError
from graft_jax.rollout import RolloutBatch, SamplingParams
from graft_jax.train.row_logprobs import mean_or_nan


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
  # Per row, True while ``old_logp`` holds the sampler's log-probs standing in for
  # the teacher-forced ones (`graft_jax.train.old_logprobs`); none by default.
  old_logp_pending_B: np.ndarray | None = None
  # A reward >= this is a success; 0: the rewards are 0 / 1 (``reward.success_threshold``).
  success_threshold: float = 0.0

  def __post_init__(self):
    if self.old_logp_pending_B is None:
      self.old_logp_pending_B = np.zeros(len(self.response_ids), bool)

  @property
  def n(self) -> int:
    return self.batch.n

  @property
  def successes_GxN(self) -> np.ndarray:
    """1 where a response succeeded: its 0/1 reward, or a reward over the threshold."""
    if self.success_threshold:
      return (self.rewards_GxN >= self.success_threshold).astype(np.float32)
    return self.rewards_GxN

  @property
  def k_G(self) -> np.ndarray:
    return self.successes_GxN.sum(axis=1).astype(np.int32)

  @property
  def old_mean_logp_B(self) -> np.ndarray:
    if self.old_logp_pending_B.any():
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
                 old_logp_pending_B=np.full(g * n, cfg.old_logp_source == "teacher_forced"),
                 success_threshold=cfg.reward.success_threshold)


def check_successes(roll: Rollout, cfg) -> None:
  """Raises ``RewardError`` (one line naming ``reward.kind``) when a method that counts
  successes gets a reward other than 0 or 1 and no ``reward.success_threshold``: a
  partial credit summed as successes would select the wrong prompts silently."""
  if cfg.reward.success_threshold:
    return
  odd = roll.rewards_GxN[(roll.rewards_GxN != 0) & (roll.rewards_GxN != 1)]
  if odd.size:
    raise RewardError(f"reward.kind {cfg.reward.kind!r} returned {float(odd[0]):g} for "
                      f"{roll.name}, but method={cfg.method} counts successes from 0/1 "
                      f"rewards; set reward.success_threshold to the score that counts as one")


def collect(policy, problems, cfg, reward_fn, seed: int, timings: dict) -> Rollout:
  """Samples n responses per problem with the policy's engine and scores them."""
  prompt_ids = [policy.prompt_ids(p.problem) for p in problems]
  batch = _generate(policy, prompt_ids, cfg, seed, timings, time.perf_counter())
  return rollout_from_batch(policy, problems, batch, prompt_ids, reward_fn, cfg, timings=timings)


def _generate(policy, prompt_ids, cfg, seed: int, timings: dict, origin: float) -> RolloutBatch:
  """The engine's batch; records ``sample_s`` and its start and end, in seconds since ``origin``."""
  t0 = time.perf_counter()
  batch = policy.engine.generate(prompt_ids, cfg.n, sampling_params(cfg, seed))
  t1 = time.perf_counter()
  timings[f"{policy.name}/sample_s"] = t1 - t0
  timings[f"{policy.name}/sample_start_s"] = t0 - origin
  timings[f"{policy.name}/sample_end_s"] = t1 - origin
  return batch


def samples_concurrently(policies: dict, mode: str) -> bool:
  """Whether the models sample (and validate) side by side, ``rollout.concurrent`` = ``mode``.

  Only engines that run out of process (a vLLM server each: ``out_of_process``)
  sample side by side: JAX samplers share the trainer's devices. Under several
  trainer processes `VLLMEngine.generate` hands process 0's batch to the others
  through a collective, which every process must enter in the same order, so the
  models take turns there too. ``'on'`` stops the run where it cannot hold.
  """
  if mode == "off":
    return False
  inside = [n for n, p in policies.items() if not getattr(p.engine, "out_of_process", False)]
  if mode == "on" and inside:
    raise ConfigError(f"rollout.concurrent='on' needs every engine out of process (vLLM); "
                      f"the engine of {', '.join(inside)} runs in process: use 'auto' or 'off'",
                      field="rollout.concurrent")
  if mode == "on" and distributed.multi_process():
    raise ConfigError("rollout.concurrent='on' needs a single trainer process (several "
                      "share each batch through a collective): use 'auto' or 'off'",
                      field="rollout.concurrent")
  return not inside and not distributed.multi_process() and len(policies) > 1


def collect_all(policies: dict, problems, cfg, reward_fn, seeds: dict,
                timings: dict) -> dict[str, Rollout]:
  """Every model's `collect` with its seed in ``seeds``; rollouts in ``policies``' order.

  When `samples_concurrently`, each model's ``engine.generate`` runs in its own
  thread, so the requests to the servers are in flight together. Only sampling
  leaves the calling thread: prompts are encoded, and responses decoded and
  scored there, in ``policies``' order, each model's as soon as its batch is
  back (while the others still sample). Scoring stays on one thread because
  the reward under several processes (`distributed.shared_reward`) gathers
  through a collective every process must enter in the same order, the
  verifier pool runs one batch at a time anyway (it holds a lock), and a
  caller's reward function need not be thread-safe. The results equal the
  sequential ones: each model's batch depends on its seed alone.

  ``timings`` gains, per model, ``sample_s``, ``reward_s`` and
  ``sample_start_s`` / ``sample_end_s``: seconds since this call began, so
  the metrics show whether the models' sampling overlapped. A sampling thread
  writes only its own dict, merged here once it is done. The first error in
  any thread is raised as it was.
  """
  origin = time.perf_counter()
  prompt_ids = {name: [p.prompt_ids(q.problem) for q in problems] for name, p in policies.items()}
  own = {name: {} for name in policies}
  def sample(name):
    return _generate(policies[name], prompt_ids[name], cfg, seeds[name], own[name], origin)
  rolls = {}
  batches = each_model(list(policies), sample, samples_concurrently(policies,
                                                                    cfg.rollout.concurrent))
  with contextlib.closing(batches):  # an error here lets the threads go at once
    for name, batch in batches:
      rolls[name] = rollout_from_batch(policies[name], problems, batch, prompt_ids[name],
                                       reward_fn, cfg, timings=own[name])
      timings.update(own[name])
  return rolls


def each_model(names: list, sample, side_by_side: bool):
  """``(name, sample(name))`` in ``names``' order; side by side, each in its own thread
  and the first failure raised as soon as it happens."""
  if not side_by_side:
    yield from ((name, sample(name)) for name in names)
    return
  pool = cf.ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="collect")
  try:
    futures = {name: pool.submit(sample, name) for name in names}
    running = set(futures.values())
    for name, future in futures.items():
      while not future.done():
        done, running = cf.wait(running, return_when=cf.FIRST_COMPLETED)
        for f in done:
          if f.exception() is not None:
            f.result()
      yield name, future.result()
  finally:
    # On an error, the other threads end with their engines (the caller closes them).
    pool.shutdown(wait=False, cancel_futures=True)
