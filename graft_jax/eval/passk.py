"""The unbiased pass@k estimator (Chen et al., 2021, "Evaluating LLMs trained
on code"): with n samples of which c are correct,

  pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k / i),

the probability that k samples drawn without replacement from the n contain at
least one correct one. The product form avoids huge binomials.
"""

from __future__ import annotations

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
  """Unbiased pass@k for one problem with ``c`` of ``n`` samples correct."""
  if not 0 <= c <= n or not 1 <= k <= n:
    raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n; "
                     f"got n={n}, c={c}, k={k}")
  if n - c < k:
    return 1.0  # every k-subset contains a correct sample
  i = np.arange(n - c + 1, n + 1, dtype=np.float64)
  return float(1.0 - np.prod(1.0 - k / i))


def mean_pass_at_k(correct_PxN: np.ndarray, k: int) -> float:
  """Mean over problems of pass@k, from a P x N boolean correctness array."""
  correct_PxN = np.asarray(correct_PxN, dtype=bool)
  if correct_PxN.ndim != 2 or correct_PxN.shape[0] == 0:
    raise ValueError(f"expected a non-empty P x N array, got {correct_PxN.shape}")
  n = correct_PxN.shape[1]
  c_P = correct_PxN.sum(axis=1)
  return float(np.mean([pass_at_k(n, int(c), k) for c in c_P]))
