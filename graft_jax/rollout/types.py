"""The rollout contract: what every engine (JAX sampler, vLLM sidecar) returns.

Rows are grouped by prompt: row ``i * n + j`` is sample ``j`` of prompt ``i``.
All arrays are host NumPy arrays so the trainer, the reward and the peer-log
store can use them without touching a device.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """Sampling settings shared by every engine.

  ``temperature == 0`` means greedy. ``top_k == 0`` and ``top_p == 1.0``
  disable those filters. ``seed`` makes a call reproducible.
  """

  max_new_tokens: int = 64
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  seed: int = 0

  def __post_init__(self):
    if self.max_new_tokens < 1:
      raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")
    if self.temperature < 0:
      raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"SamplingParams.top_k must be >= 0, got {self.top_k}")


@dataclasses.dataclass(frozen=True)
class RolloutBatch:
  """``B = num_prompts * n`` sampled responses, padded to ``L`` tokens.

  Attributes:
    tokens_BxL: int32 response token ids; positions past the end hold pad.
    mask_BxL: bool, True on real response tokens (the EOS token included when
      the response finished).
    logp_BxL: float32 log-prob of each sampled token under the generator,
      ``log_softmax(logits / T)`` of the unfiltered distribution; 0 where
      ``mask`` is False.
    finished_B: bool, the response ended with EOS.
    truncated_B: bool, the response hit ``max_new_tokens`` without EOS.
    prompt_index_B: int32, index into the ``prompts`` passed to ``generate``.
    n: samples per prompt.
    engine_metrics: what the engine measured of this call (the slot pool's tokens,
      occupancy and KV bytes); a step's metrics log them beside the rollouts'.
  """

  tokens_BxL: np.ndarray
  mask_BxL: np.ndarray
  logp_BxL: np.ndarray
  finished_B: np.ndarray
  truncated_B: np.ndarray
  prompt_index_B: np.ndarray
  n: int
  engine_metrics: dict = dataclasses.field(default_factory=dict)

  @property
  def lengths_B(self) -> np.ndarray:
    return self.mask_BxL.sum(axis=1).astype(np.int32)

  def response_ids(self, b: int) -> list[int]:
    """The real (unpadded) token ids of row ``b``."""
    return self.tokens_BxL[b, : int(self.mask_BxL[b].sum())].tolist()


def check_generate_args(prompts: Sequence[Sequence[int]], n: int) -> None:
  """The argument checks every engine's ``generate`` starts with."""
  if not prompts:
    raise ValueError("generate: no prompts")
  if n < 1:
    raise ValueError(f"generate: n must be >= 1, got {n}")
  for i, p in enumerate(prompts):
    if len(p) == 0:
      raise ValueError(f"generate: prompt {i} is empty")


@runtime_checkable
class RolloutEngine(Protocol):
  """Anything that samples ``n`` responses per prompt from one policy."""

  def generate(self, prompts: Sequence[Sequence[int]], n: int,
               params: SamplingParams) -> RolloutBatch:
    """Sample ``n`` responses for each token-id prompt."""
    ...

  def set_weights(self, model) -> None:
    """Make later ``generate`` calls use the weights of ``model``."""
    ...
