"""``select_exchange_k`` against a brute-force reference written from its definition.

The reference loops over receivers, prompts and pairs in plain Python (issue
16's definition: largest mixed peer, ties to the lowest index; per unordered
pair keep the top m = min(|C(p->r)|, |C(r->p)|) by the source's count, ties at
the cutoff kept). Every pair golden of ``test_exchange.py`` is also run through
the K-model function.
"""

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from graft_jax.core import select_exchange, select_exchange_k
from tests.core import reference

N = 8


def exchange_k_reference(k, n, balance=True):
  k = [[int(v) for v in row] for row in np.asarray(k)]
  m_models, g = len(k), len(k[0])
  source = [[-1] * g for _ in range(m_models)]
  for r in range(m_models):
    for q in range(g):
      if k[r][q] != 0:
        continue
      best = -1
      for p in range(m_models):  # ascending: a tie keeps the lower index
        if p != r and 1 <= k[p][q] <= n - 1 and (best < 0 or k[p][q] > k[best][q]):
          best = p
      source[r][q] = best
  if not balance:
    return np.array(source)
  out = [[-1] * g for _ in range(m_models)]
  for r in range(m_models):
    for p in range(m_models):
      if p == r:
        continue
      into_r = [q for q in range(g) if source[r][q] == p]
      into_p = [q for q in range(g) if source[p][q] == r]
      m = min(len(into_r), len(into_p))
      if m == 0:
        continue
      cutoff = sorted((k[p][q] for q in into_r), reverse=True)[m - 1]
      for q in into_r:
        if k[p][q] >= cutoff:
          out[r][q] = p
  return np.array(out)


def test_three_models_golden_by_hand():
  # q0: A fails, B has 3 and C has 5 -> A takes C's. q1: A fails, B and C tie at 2 -> B.
  # q2: B fails, A has 4 -> B takes A's. q3: C fails, A has 1, B has 7 -> C takes B's.
  # q4: C fails, A has 6 -> A. Pairs: {A,B}: C(B->A) = {q1}, C(A->B) = {q2}: m = 1, both kept.
  # {A,C}: C(C->A) = {q0}, C(A->C) = {q4}: m = 1. {B,C}: C(B->C) = {q3}, C(C->B) = {}: m = 0.
  k = np.array([[0, 0, 4, 1, 6],
                [3, 2, 0, 7, 8],
                [5, 2, 3, 0, 0]])
  want = [[2, 1, -1, -1, -1],
          [-1, -1, 0, -1, -1],
          [-1, -1, -1, -1, 0]]
  assert np.asarray(select_exchange_k(k, N)).tolist() == want
  assert exchange_k_reference(k, N).tolist() == want
  unbalanced = [[2, 1, -1, -1, -1], [-1, -1, 0, -1, -1], [-1, -1, -1, 1, 0]]
  assert np.asarray(select_exchange_k(k, N, balance=False)).tolist() == unbalanced


@pytest.mark.parametrize("k_a,k_b,balance,want_a,want_b", [
    # The goldens of tests/core/test_exchange.py, as (A receives, B receives).
    ([0, 0, 0, 0, 2, 6, 8, 0], [5, 3, 3, 1, 0, 0, 4, 8], True,
     [1, 1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0]),
    ([0, 3], [8, 0], False, [0, 0], [0, 1]),
    ([0, 0, 3, 8], [4, 2, 5, 8], True, [0, 0, 0, 0], [0, 0, 0, 0]),
    ([0, 0, 3, 8], [4, 2, 5, 8], False, [1, 1, 0, 0], [0, 0, 0, 0]),
])
def test_pair_goldens_hold_through_the_k_model_rule(k_a, k_b, balance, want_a, want_b):
  source = np.asarray(select_exchange_k(np.array([k_a, k_b]), N, balance=balance))
  assert (source[0] == 1).astype(int).tolist() == want_a
  assert (source[1] == 0).astype(int).tolist() == want_b
  assert set(np.unique(source[0])) <= {-1, 1} and set(np.unique(source[1])) <= {-1, 0}


def test_jit_and_dtype():
  k = np.array([[0, 0, 4, 1], [3, 2, 0, 7], [5, 2, 3, 0]])
  got = jax.jit(lambda x: select_exchange_k(x, N))(k)
  assert got.dtype == np.int32 and got.shape == (3, 4)
  assert np.array_equal(got, exchange_k_reference(k, N))


models = st.integers(2, 4)


@settings(max_examples=60, deadline=None)
@given(models, st.integers(1, 12), st.booleans(), st.randoms(use_true_random=False))
def test_matches_bruteforce(m_models, g, balance, rnd):
  k = np.array([[rnd.randint(0, N) for _ in range(g)] for _ in range(m_models)])
  got = np.asarray(select_exchange_k(k, N, balance=balance))
  want = exchange_k_reference(k, N, balance=balance)
  assert np.array_equal(got, want), (k, got, want)
  rows, cols = np.nonzero(got >= 0)
  src = got[rows, cols]
  # A receiver only takes groups it failed entirely, from a peer whose group was mixed.
  assert np.all(k[rows, cols] == 0) and np.all(src != rows)
  assert np.all((k[src, cols] >= 1) & (k[src, cols] <= N - 1))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.booleans(), st.randoms(use_true_random=False))
def test_equals_the_pair_rule_at_k2(g, balance, rnd):
  k = np.array([[rnd.randint(0, N) for _ in range(g)] for _ in range(2)])
  source = np.asarray(select_exchange_k(k, N, balance=balance))
  a, b = select_exchange(k[0], k[1], N, balance=balance)
  ra, rb = reference.exchange(k[0], k[1], N, balance=balance)
  assert np.array_equal(source[0] == 1, ra) and np.array_equal(source[1] == 0, rb)
  assert np.array_equal(np.asarray(a), ra) and np.array_equal(np.asarray(b), rb)
