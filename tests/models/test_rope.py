"""apply_rope: values and gradients against float64 NumPy, with each pair's 2 x 2
rotation written out by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax.models.layers import apply_rope


def _rotation_float64(x, positions, inv_freq):
  """Pair i = (x_i, x_{i+H/2}) turned by theta_i = position x inv_freq_i: (y, the matrices)."""
  half = x.shape[-1] // 2
  # The angle is a float32 product, as in transformers; the rest is float64.
  theta = (positions[..., None, None].astype(np.float32) * inv_freq).astype(np.float64)
  c, s = np.cos(theta), np.sin(theta)
  x1, x2 = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
  return np.concatenate([c * x1 - s * x2, s * x1 + c * x2], axis=-1), c, s


@pytest.mark.parametrize("shape", [(2, 5, 3, 8), (1, 7, 2, 64)])
def test_value_and_gradient_equal_float64_rotation(shape):
  rng = np.random.default_rng(3)
  x = rng.standard_normal(shape).astype(np.float32)
  g = rng.standard_normal(shape).astype(np.float32)
  positions = rng.integers(0, 300, shape[:2]).astype(np.int32)
  inv_freq = (10000.0 ** (-np.arange(0, shape[-1], 2) / shape[-1])).astype(np.float32)

  y, vjp = jax.vjp(lambda a: apply_rope(a, jnp.asarray(positions), jnp.asarray(inv_freq), 300),
                   jnp.asarray(x))
  (dx,) = jax.jit(vjp)(jnp.asarray(g))

  want_y, c, s = _rotation_float64(x, positions, inv_freq)
  half = shape[-1] // 2
  g1, g2 = g[..., :half].astype(np.float64), g[..., half:].astype(np.float64)
  # The transpose of [[c, -s], [s, c]] applied to (g1, g2).
  want_dx = np.concatenate([c * g1 + s * g2, -s * g1 + c * g2], axis=-1)
  np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-5, atol=1e-5)


def test_gradient_of_the_gradient_matches_finite_differences():
  """Second order, reverse over reverse and forward over reverse: Hessian-vector
  products of sum(rope(x)^2 * w) against central differences of the gradient."""
  rng = np.random.default_rng(4)
  shape = (1, 3, 2, 8)
  x, v, w = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
  positions = jnp.asarray(rng.integers(0, 50, shape[:2]), jnp.int32)
  inv_freq = jnp.asarray(10000.0 ** (-np.arange(0, 8, 2) / 8), jnp.float32)
  f = lambda a: jnp.sum(apply_rope(a, positions, inv_freq, 50) ** 2 * w)
  grad = jax.jit(jax.grad(f))
  eps = 1e-2
  fd = (np.asarray(grad(x + eps * v), np.float64) - np.asarray(grad(x - eps * v), np.float64))
  for hvp in (jax.jit(jax.grad(lambda a: jnp.vdot(jax.grad(f)(a), v)))(jnp.asarray(x)),
              jax.jvp(grad, (jnp.asarray(x),), (jnp.asarray(v),))[1]):
    np.testing.assert_allclose(np.asarray(hvp), fd / (2 * eps), rtol=1e-3, atol=1e-3)


def test_positions_outside_the_table_give_nan():
  x = jnp.ones((1, 3, 2, 8), jnp.float32)
  inv_freq = jnp.asarray(10000.0 ** (-np.arange(0, 8, 2) / 8), jnp.float32)
  y = np.asarray(jax.jit(apply_rope, static_argnums=3)(x, jnp.asarray([[0, 9, 10]]), inv_freq, 10))
  assert np.isfinite(y[0, :2]).all() and np.isnan(y[0, 2]).all()
