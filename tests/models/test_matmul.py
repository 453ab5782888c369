"""linear: values and both gradients against float64 NumPy, on both weight-gradient branches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax.models.matmul import linear


@pytest.mark.parametrize("shape_x,shape_w,in_dims", [
    ((3, 5, 8), (8, 2, 6), 1),     # K = 8 <= N = 12: x is transposed
    ((3, 5, 2, 6), (2, 6, 4), 2),  # K = 12 > N = 4: g is transposed
])
def test_value_and_gradients_equal_float64_numpy(shape_x, shape_w, in_dims):
  rng = np.random.default_rng(0)
  x = rng.standard_normal(shape_x).astype(np.float32)
  w = rng.standard_normal(shape_w).astype(np.float32)
  out_shape = shape_x[:len(shape_x) - in_dims] + shape_w[in_dims:]
  g = rng.standard_normal(out_shape).astype(np.float32)

  y, vjp = jax.vjp(lambda a, b: linear(a, b, in_dims), jnp.asarray(x), jnp.asarray(w))
  dx, dw = jax.jit(vjp)(jnp.asarray(g))

  k = int(np.prod(shape_w[:in_dims]))
  x2, w2 = x.reshape(-1, k).astype(np.float64), w.reshape(k, -1).astype(np.float64)
  g2 = g.reshape(x2.shape[0], -1).astype(np.float64)
  np.testing.assert_allclose(np.asarray(y), (x2 @ w2).reshape(out_shape), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(dx), (g2 @ w2.T).reshape(shape_x), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(dw), (x2.T @ g2).reshape(shape_w), rtol=1e-5, atol=1e-5)
  assert dx.dtype == dw.dtype == jnp.float32


def test_mismatched_axes_are_refused():
  with pytest.raises(ValueError, match="disagree"):
    linear(jnp.zeros((2, 3)), jnp.zeros((4, 5)))
