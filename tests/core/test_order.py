import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from graft_jax.core import order_minibatches


def test_peer_last_puts_grafted_groups_in_the_last_minibatches():
  grafted = np.array([1, 0, 0, 1, 0, 0, 0, 0], bool)
  perm = np.asarray(order_minibatches(grafted, 4))
  assert sorted(perm.tolist()) == list(range(8))
  mb = perm.reshape(4, 2)
  assert mb[-1].tolist() == [0, 3]
  assert not grafted[mb[:-1]].any()


def test_peer_first():
  grafted = np.array([0, 0, 1, 0, 1, 0], bool)
  perm = np.asarray(order_minibatches(grafted, 3, order="peer_first"))
  assert perm[:2].tolist() == [2, 4]


def test_uniform_is_seeded():
  g = np.zeros(16, bool)
  p1 = order_minibatches(g, 4, order="uniform", key=jax.random.key(0))
  p2 = order_minibatches(g, 4, order="uniform", key=jax.random.key(0))
  p3 = order_minibatches(g, 4, order="uniform", key=jax.random.key(1))
  assert np.array_equal(p1, p2) and not np.array_equal(p1, p3)
  with pytest.raises(ValueError, match="key"):
    order_minibatches(g, 4, order="uniform")


def test_indivisible_is_rejected():
  with pytest.raises(ValueError, match="divide"):
    order_minibatches(np.zeros(6, bool), 4)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=32).filter(lambda x: len(x) % 2 == 0 or len(x) == 1),
       st.sampled_from(["peer_last", "peer_first", "uniform"]), st.integers(0, 99), st.booleans())
def test_is_a_permutation_and_respects_the_order(flags, order, seed, use_key):
  grafted = np.array(flags, bool)
  k = 1 if len(flags) == 1 else 2
  key = jax.random.key(seed) if (use_key or order == "uniform") else None
  perm = np.asarray(order_minibatches(grafted, k, order=order, key=key))
  assert sorted(perm.tolist()) == list(range(len(flags)))
  seq = grafted[perm]
  if order == "peer_last":
    assert np.all(np.diff(seq.astype(int)) >= 0)
  if order == "peer_first":
    assert np.all(np.diff(seq.astype(int)) <= 0)
