import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from graft_jax.core import compat_weights, masked_mean_logp


def test_golden():
  recv = jnp.array([-1.0, -1.0, -1.0, -0.5])
  gen = jnp.array([-1.0, -0.9, -0.5, -1.0])
  w, admitted = compat_weights(recv, gen, delta=0.8)
  # s = exp(0)=1 -> w 1; exp(-0.1)=0.9048 > 0.8 -> w 0.9048; exp(-0.5)=0.6065 <= 0.8 -> 0;
  # exp(0.5)=1.65 -> capped at 1.
  np.testing.assert_allclose(w, [1.0, np.exp(-0.1), 0.0, 1.0], rtol=1e-6)
  assert np.asarray(admitted).tolist() == [True, True, False, True]


def test_non_finite_is_dropped():
  w, admitted = compat_weights(jnp.array([jnp.nan, -1.0, jnp.inf, -jnp.inf]),
                               jnp.array([-1.0, jnp.nan, -1.0, -1.0]))
  assert np.all(np.asarray(w) == 0.0) and not np.asarray(admitted).any()


def test_delta_zero_admits_every_finite_response():
  w, admitted = compat_weights(jnp.array([-200.0]), jnp.array([-1.0]), delta=0.0)
  assert bool(admitted[0]) and float(w[0]) >= 0.0


def test_delta_out_of_range():
  with pytest.raises(ValueError, match="delta"):
    compat_weights(jnp.zeros(1), jnp.zeros(1), delta=1.0)


def test_masked_mean_logp_and_empty_rows():
  logp = jnp.array([[-1.0, -3.0, 99.0], [5.0, 5.0, 5.0]])
  mask = jnp.array([[1, 1, 0], [0, 0, 0]])
  mean = masked_mean_logp(logp, mask)
  assert float(mean[0]) == -2.0 and np.isnan(float(mean[1]))
  w, admitted = compat_weights(mean, jnp.array([-2.0, -2.0]))
  assert np.asarray(admitted).tolist() == [True, False]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(-50, 0), st.floats(-50, 0)), min_size=1, max_size=30),
       st.sampled_from([0.0, 0.5, 0.8, 0.9]))
def test_properties(pairs, delta):
  recv = np.array([p[0] for p in pairs], np.float32)
  gen = np.array([p[1] for p in pairs], np.float32)
  w, admitted = compat_weights(recv, gen, delta=delta)
  w, admitted = np.asarray(w), np.asarray(admitted)
  assert np.all((w >= 0) & (w <= 1))
  assert np.all(w[~admitted] == 0)
  s = np.exp(recv.astype(np.float64) - gen)
  clear = np.abs(s - delta) > 1e-4  # away from the float32 boundary
  assert np.array_equal(admitted[clear], (s > delta)[clear])
  np.testing.assert_allclose(w[admitted], np.minimum(s, 1)[admitted], rtol=1e-5)


def test_jit_agrees():
  recv, gen = jax.random.normal(jax.random.key(1), (2, 64)) * 0.3 - 1.0
  f = jax.jit(lambda a, b: compat_weights(a, b, delta=0.8))
  for got, want in zip(f(recv, gen), compat_weights(recv, gen, delta=0.8)):
    np.testing.assert_allclose(got, want, rtol=1e-6)
