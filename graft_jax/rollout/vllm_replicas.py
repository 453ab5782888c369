"""One model served by several vLLM servers (data-parallel replicas), used as one engine.

A pair's node has more GPUs than models: with one server per model, the GPUs left
idle while the models sample are half the node (docs/clusters.md). With
``vllm.data_parallel`` = R each model gets R servers, each a `VLLMEngine` on its own
GPU(s). A call's prompts split into R contiguous parts sampled at once, each part
with the request seeds one server would give those prompts, so a row's tokens do not
depend on how many replicas serve it. Every sync reaches every replica, each by its
own backend (`config.placement.sync_backend`: the replica on the trainer's sending
GPU by CUDA IPC, the others by NCCL), and one replica's aborted push stops sampling
as a single server's does.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Sequence

import numpy as np

from graft_jax.rollout.types import RolloutBatch, SamplingParams, check_generate_args


def split(num: int, parts: int) -> list[tuple[int, int]]:
  """``[start, end)`` of ``parts`` contiguous parts of ``num`` items, sizes differing by at
  most one, the larger first; empty parts are left out."""
  size, extra = divmod(num, parts)
  out, start = [], 0
  for i in range(parts):
    end = start + size + (1 if i < extra else 0)
    if end > start:
      out.append((start, end))
    start = end
  return out


def concat(batches: list[RolloutBatch], starts: list[int]) -> RolloutBatch:
  """The rows of ``batches`` in order, their prompt indices shifted by each part's start."""
  return RolloutBatch(
      tokens_BxL=np.concatenate([b.tokens_BxL for b in batches]),
      mask_BxL=np.concatenate([b.mask_BxL for b in batches]),
      logp_BxL=np.concatenate([b.logp_BxL for b in batches]),
      finished_B=np.concatenate([b.finished_B for b in batches]),
      truncated_B=np.concatenate([b.truncated_B for b in batches]),
      prompt_index_B=np.concatenate([b.prompt_index_B + s for b, s in zip(batches, starts)]),
      n=batches[0].n)


class VLLMReplicas:
  """``engines`` (`VLLMEngine`s of one model, one server each) as one engine."""

  out_of_process = True

  def __init__(self, engines: Sequence):
    if not engines:
      raise ValueError("VLLMReplicas needs at least one engine")
    self.engines = list(engines)
    self._pool = cf.ThreadPoolExecutor(max_workers=len(self.engines),
                                       thread_name_prefix="vllm-replica")
    self.last_sync_metrics: dict[str, float] = {}

  @property
  def name(self) -> str:
    return self.engines[0].name

  @property
  def sync_failure(self):
    """The first replica's aborted push, if any (that replica holds older weights)."""
    return next((e.sync_failure for e in self.engines if e.sync_failure is not None), None)

  def set_weights(self, model) -> None:
    """Every replica serves ``model``'s weights; ``last_sync_metrics`` adds the replicas'
    seconds and bytes, and keeps the largest probe gap and every restart."""
    for e in self.engines:  # in turn: each push reads the trainer's arrays
      e.set_weights(model)
    merged: dict[str, float] = {}
    for e in self.engines:
      for k, v in e.last_sync_metrics.items():
        take_max = k.startswith("vllm_probe") or k == "vllm_sync_aborted"
        merged[k] = max(merged.get(k, v), v) if take_max else merged.get(k, 0.0) + v
    merged["vllm_replicas"] = float(len(self.engines))
    self.last_sync_metrics = merged

  def generate(self, prompts: Sequence[Sequence[int]], n: int,
               params: SamplingParams) -> RolloutBatch:
    """Samples ``n`` responses per prompt, the prompts split over the replicas (module)."""
    check_generate_args(prompts, n)
    if self.sync_failure is not None:
      raise self.sync_failure
    parts = split(len(prompts), len(self.engines))
    futures = [self._pool.submit(e.generate, prompts[s:t], n, params, prompt_offset=s)
               for e, (s, t) in zip(self.engines, parts)]
    cf.wait(futures)
    return concat([f.result() for f in futures], [s for s, _ in parts])

  def close(self) -> None:
    """Stops every replica's server; idempotent."""
    for e in self.engines:
      e.close()
    self._pool.shutdown(wait=False)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
