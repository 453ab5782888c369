"""The response lengths a plan assumes: a gamma distribution clipped at the cap.

A step's cost turns on the lengths in more ways than their mean: the JAX
sampler's call and the validation's 64-problem calls last until their longest
row (the expected maximum of B rows), the scorer pads a chunk to its longest
row's bucket, and the update packs rows by length. So the plan takes the
distribution, not a fill factor: response length X ~ Gamma(shape k, scale
theta), min(X, cap), with theta set so the clipped mean is the stated one
(docs/plan.md justifies the defaults). A row at the cap is a truncated one.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from scipy import stats


@dataclasses.dataclass(frozen=True)
class ResponseLengths:
  """Clipped-gamma response lengths: ``cap`` (``max_response_len``), the clipped
  ``mean`` and the gamma ``shape`` (1: exponential; larger: less spread)."""
  cap: int
  mean: float
  shape: float = 2.0

  def __post_init__(self):
    if not 1 <= self.mean < self.cap or self.shape <= 0:
      raise ValueError(f"response lengths: need 1 <= mean < cap and shape > 0; got mean "
                       f"{self.mean}, cap {self.cap}, shape {self.shape}")

  @functools.cached_property
  def pmf(self) -> np.ndarray:
    """P(length = x) for x = 1..cap (index x - 1); the tail past the cap sits at the cap."""
    return _pmf(self.cap, self.shape, _scale(self.cap, self.mean, self.shape))

  @functools.cached_property
  def cdf(self) -> np.ndarray:
    return np.minimum(np.cumsum(self.pmf), 1.0)

  @property
  def truncated(self) -> float:
    """The share of rows that reach the cap."""
    return float(self.pmf[-1])

  def expected(self, fn=lambda x: x) -> float:
    """E[fn(length)]."""
    return float(np.dot(self.pmf, fn(np.arange(1, self.cap + 1, dtype=np.float64))))

  def expected_max(self, rows: int) -> float:
    """E[max of ``rows`` independent lengths] = sum over x < cap of 1 - F(x)^rows:
    how many decode steps a call of ``rows`` rows runs."""
    below = np.concatenate([[0.0], self.cdf[:-1]])  # F(x) for x = 0..cap-1
    return float(np.sum(1.0 - below ** rows))

  def sample(self, rows: int, seed: int = 0) -> np.ndarray:
    """``rows`` lengths at the (i + 1/2) / rows quantiles, in a seeded random order:
    a batch with exactly the distribution's shape, for the packing rules to pad."""
    q = (np.arange(rows) + 0.5) / rows
    lengths = np.searchsorted(self.cdf, q) + 1
    return np.random.default_rng(seed).permutation(np.minimum(lengths, self.cap))


def _pmf(cap: int, shape: float, scale: float) -> np.ndarray:
  cdf = stats.gamma.cdf(np.arange(1, cap + 1, dtype=np.float64), shape, scale=scale)
  cdf[-1] = 1.0
  return np.diff(np.concatenate([[0.0], cdf]))


@functools.lru_cache(maxsize=64)
def _scale(cap: int, mean: float, shape: float) -> float:
  """The gamma scale whose clipped lengths have ``mean`` (bisection: the clipped mean
  grows with the scale)."""
  xs = np.arange(1, cap + 1, dtype=np.float64)
  lo, hi = 1e-6, 1e3 * cap
  for _ in range(200):
    mid = (lo * hi) ** 0.5
    if np.dot(_pmf(cap, shape, mid), xs) < mean:
      lo = mid
    else:
      hi = mid
    if hi / lo < 1 + 1e-12:
      break
  return (lo * hi) ** 0.5
