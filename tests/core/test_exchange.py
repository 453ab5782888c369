import jax
import numpy as np
from hypothesis import given, settings, strategies as st

from graft_jax.core import select_exchange
from tests.core import reference

N = 8


def test_imbalanced_with_ties_keeps_more_than_m():
  # A fails on q0..q3; B's counts there are 5, 3, 3, 1 -> 4 candidates for A.
  # B fails on q4, q5; A's counts 2, 6 -> 2 candidates for B. m = 2.
  k_a = np.array([0, 0, 0, 0, 2, 6, 8, 0])
  k_b = np.array([5, 3, 3, 1, 0, 0, 4, 8])
  a, b = select_exchange(k_a, k_b, N)
  # A keeps top-2 by k_B (5, 3) plus the other 3 tied at the cutoff -> 3 prompts > m.
  assert np.asarray(a).tolist() == [True, True, True, False, False, False, False, False]
  assert np.asarray(b).tolist() == [False, False, False, False, True, True, False, False]


def test_all_pass_peer_is_not_a_candidate():
  # q7: A fails, B passes all 8 -> nothing to contrast, not a candidate.
  a, _ = select_exchange(np.array([0, 3]), np.array([8, 0]), N, balance=False)
  assert np.asarray(a).tolist() == [False, False]


def test_m_zero_transfers_nothing_either_way():
  k_a = np.array([0, 0, 3, 8])
  k_b = np.array([4, 2, 5, 8])  # A has 2 candidates, B has none.
  a, b = select_exchange(k_a, k_b, N)
  assert not np.asarray(a).any() and not np.asarray(b).any()


def test_balance_off_keeps_every_candidate():
  k_a = np.array([0, 0, 3, 8])
  k_b = np.array([4, 2, 5, 8])
  a, b = select_exchange(k_a, k_b, N, balance=False)
  assert np.asarray(a).tolist() == [True, True, False, False]
  assert not np.asarray(b).any()


def test_jit_agrees():
  k_a = np.array([0, 0, 0, 0, 2, 6, 8, 0])
  k_b = np.array([5, 3, 3, 1, 0, 0, 4, 8])
  f = jax.jit(lambda x, y: select_exchange(x, y, N))
  for got, want in zip(f(k_a, k_b), select_exchange(k_a, k_b, N)):
    assert np.array_equal(got, want)


counts = st.lists(st.tuples(st.integers(0, N), st.integers(0, N)), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(counts, st.booleans())
def test_matches_bruteforce(pairs, balance):
  k_a = np.array([p[0] for p in pairs])
  k_b = np.array([p[1] for p in pairs])
  a, b = select_exchange(k_a, k_b, N, balance=balance)
  ra, rb = reference.exchange(k_a, k_b, N, balance=balance)
  assert np.array_equal(np.asarray(a), ra) and np.array_equal(np.asarray(b), rb)
  a, b = np.asarray(a), np.asarray(b)
  # Invariants: a receiver only takes groups it failed and the peer mixed.
  assert np.all(k_a[a] == 0) and np.all((k_b[a] >= 1) & (k_b[a] <= N - 1))
  assert np.all(k_b[b] == 0) and np.all((k_a[b] >= 1) & (k_a[b] <= N - 1))
  if balance:
    # Both directions keep at least m, and one side empty means both are.
    assert (a.sum() == 0) == (b.sum() == 0)
