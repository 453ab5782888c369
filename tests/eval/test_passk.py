"""pass@k against a brute-force count over all k-subsets of the samples."""

import itertools

from hypothesis import given, strategies as st
import numpy as np
import pytest

from graft_jax.eval import mean_pass_at_k, pass_at_k


def _brute_force(n: int, c: int, k: int) -> float:
  samples = [True] * c + [False] * (n - c)
  subsets = list(itertools.combinations(range(n), k))
  return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_all_small_cases_match_brute_force(n):
  for c in range(n + 1):
    for k in range(1, n + 1):
      assert pass_at_k(n, c, k) == pytest.approx(_brute_force(n, c, k), abs=1e-12)


@given(st.integers(1, 64).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_properties(nck):
  n, c, k = nck
  p = pass_at_k(n, c, k)
  assert 0.0 <= p <= 1.0
  assert pass_at_k(n, c, 1) == pytest.approx(c / n)  # pass@1 = mean correct
  if k < n:
    assert pass_at_k(n, c, k + 1) >= p - 1e-12     # monotone in k


def test_mean_over_problems():
  correct_PxN = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
  assert mean_pass_at_k(correct_PxN, 1) == pytest.approx((0.25 + 1 + 0) / 3)
  assert mean_pass_at_k(correct_PxN, 4) == pytest.approx(2 / 3)
  assert mean_pass_at_k(correct_PxN, 2) == pytest.approx((0.5 + 1 + 0) / 3)


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_bad_arguments(n, c, k):
  with pytest.raises(ValueError):
    pass_at_k(n, c, k)
