"""HACPO capability estimate: rolling success rate per model and their ratio.

P_m = mean over the last `window` steps of model m's per-step success rate
(share of its own rollouts with reward > 0). The capability ratio
P_learner / P_source is clamped to [0.1, 10]; it is 1 until both models have
a recorded step. HACPO's baseline weights peer rewards by ratio(learner,
source); its cross-sample loss factor is ratio(source, learner).
"""

from __future__ import annotations

import collections
import math
from typing import Any, Mapping, Sequence

import numpy as np

# Keeps P > 0 so a model that solved nothing still gives a finite ratio (then
# clamped); two such models give exactly 1.
_FLOOR = 1e-8


class CapabilityTracker:
  """Pure-Python state; `to_dict` / `from_dict` go into checkpoint metadata."""

  def __init__(self, models: Sequence[str], *, window: int = 5,
               ratio_clamp: tuple[float, float] = (0.1, 10.0)):
    if not models or len(set(models)) != len(models):
      raise ValueError(f'models must be unique and non-empty, got {models}')
    if window < 1:
      raise ValueError(f'window must be >= 1, got {window}')
    lo, hi = ratio_clamp
    if not 0 < lo <= 1 <= hi:
      raise ValueError(f'ratio_clamp must satisfy 0 < low <= 1 <= high, '
                       f'got {ratio_clamp}')
    self.models = tuple(models)
    self.window = window
    self.ratio_clamp = (float(lo), float(hi))
    self.steps = 0
    self._history = {m: collections.deque(maxlen=window) for m in self.models}

  def update(self, rewards: Mapping[str, Any]) -> dict[str, float]:
    """Records one step: each model's own rewards (any shape, any count).

    Returns:
      The new success rates, by model.
    """
    if set(rewards) != set(self.models):
      raise ValueError(f'capability update needs rewards of exactly '
                       f'{self.models}, got {tuple(rewards)}')
    rates = {}
    for model in self.models:
      r = np.asarray(rewards[model], dtype=np.float64)
      if r.size == 0 or not np.all(np.isfinite(r)):
        raise ValueError(f'rewards of {model!r} must be non-empty and finite')
      rates[model] = float(np.mean(r > 0))
    for model, rate in rates.items():
      self._history[model].append(rate)
    self.steps += 1
    return rates

  def success_rate(self, model: str) -> float | None:
    """P_model over the window; None before the first recorded step."""
    history = self._history[model]
    if not history:
      return None
    return max(math.fsum(history) / len(history), _FLOOR)

  def ratio(self, learner: str, source: str) -> float:
    """clamp(P_learner / P_source, *ratio_clamp); 1 before any step."""
    p_learner, p_source = self.success_rate(learner), self.success_rate(source)
    if p_learner is None or p_source is None:
      return 1.0
    lo, hi = self.ratio_clamp
    return min(max(p_learner / p_source, lo), hi)

  def to_dict(self) -> dict[str, Any]:
    return {'models': list(self.models), 'window': self.window,
            'ratio_clamp': list(self.ratio_clamp), 'steps': self.steps,
            'history': {m: list(h) for m, h in self._history.items()}}

  @classmethod
  def from_dict(cls, state: Mapping[str, Any]) -> CapabilityTracker:
    tracker = cls(state['models'], window=state['window'],
                  ratio_clamp=tuple(state['ratio_clamp']))
    for model in tracker.models:
      values = [float(v) for v in state['history'][model]]
      if len(values) > tracker.window or not all(0 <= v <= 1 for v in values):
        raise ValueError(f'invalid capability history for {model!r}: {values}')
      tracker._history[model].extend(values)
    tracker.steps = int(state['steps'])
    return tracker
