"""An exact-answer reward for synthetic tasks: no math-verify, no worker pool.

A response scores 1 iff its last complete ``\\boxed{...}`` holds the gold
answer: the same string after value-preserving normalization, or plain
numeric literals of the same value (integers, ``a/b``, ``\\frac{a}{b}``, short
decimals: ``0.5`` and ``1/2`` agree; ``graft_jax.rewards.extract``). Anything
else, a response without a box included, scores 0. For golds that are plain
numbers, as the synthetic families' are, this is equality of values.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from graft_jax.rewards import extract
from graft_jax.rewards.score import ScoreStats


def exact_score(responses: Sequence[str], golds: Sequence[str]) -> tuple[np.ndarray, ScoreStats]:
  """``(rewards_B, stats)``: float32 0/1 per response, with ``total``, ``correct``,
  ``no_boxed`` and ``fast_path`` (every boxed response) counted."""
  if len(responses) != len(golds):
    raise ValueError(f"exact_score: {len(responses)} responses but {len(golds)} golds")
  start = time.perf_counter()
  stats = ScoreStats(total=len(responses))
  rewards_B = np.zeros(len(responses), np.float32)
  for b, (response, gold) in enumerate(zip(responses, golds)):
    boxed = extract.last_boxed(response)
    if boxed is None:
      stats.no_boxed += 1
      continue
    stats.fast_path += 1
    rewards_B[b] = float(extract.fast_decision(extract.gold_content(gold), boxed) is True)
  stats.correct = int(rewards_B.sum())
  stats.seconds = time.perf_counter() - start
  return rewards_B, stats
