"""The finite check of an optimizer step: each quantity flagged on its own, and a flagged
step keeps the old state exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax.core import finite


def _params(bad=None):
  p = {"w_DxF": jnp.ones((3, 4)), "b_F": jnp.zeros(4), "count": jnp.array(2, jnp.int32)}
  if bad is not None:
    p["w_DxF"] = p["w_DxF"].at[2, 1].set(bad)
  return p


@pytest.mark.parametrize("loss, norm, bad, want", [
    (1.0, 1.0, None, [0, 0, 0]),
    (jnp.nan, 1.0, None, [1, 0, 0]),
    (1.0, jnp.inf, None, [0, 1, 0]),
    (1.0, 1.0, -jnp.inf, [0, 0, 1]),
    (jnp.nan, jnp.nan, jnp.nan, [1, 1, 1]),
])
def test_each_quantity_is_flagged_on_its_own(loss, norm, bad, want):
  flags = jax.jit(finite.nonfinite_flags)(jnp.float32(loss), jnp.float32(norm), _params(bad))
  np.testing.assert_array_equal(flags, want)
  assert flags.dtype == jnp.int32


def test_a_flagged_step_keeps_the_old_state_and_a_clean_one_takes_the_new():
  old, new = _params(), jax.tree.map(lambda x: x + 1, _params())
  keep = jax.jit(finite.keep_if_nonfinite)
  for x, y in zip(jax.tree.leaves(keep(jnp.array([0, 1, 0]), new, old)), jax.tree.leaves(old)):
    np.testing.assert_array_equal(x, y)
  for x, y in zip(jax.tree.leaves(keep(jnp.zeros(3, jnp.int32), new, old)),
                  jax.tree.leaves(new)):
    np.testing.assert_array_equal(x, y)


def test_integer_leaves_are_not_checked():
  assert bool(finite.all_finite({"n": jnp.array(-1, jnp.int32), "x": jnp.ones(2)}))
  assert not bool(finite.all_finite({"n": jnp.array(-1, jnp.int32), "x": jnp.array([1., jnp.nan])}))


@pytest.mark.parametrize("keep_old", [False, True])
def test_checked_keeps_the_old_state_only_in_skip_mode(keep_old):
  old = (_params(), {"mu": jnp.zeros(4)})
  new = (_params(jnp.nan), {"mu": jnp.ones(4)})
  state, flags = jax.jit(finite.checked, static_argnames="keep_old")(
      jnp.float32(1.0), jnp.float32(1.0), old, new, keep_old=keep_old)
  np.testing.assert_array_equal(flags, [0, 0, 1])
  want = old if keep_old else new
  for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(want)):
    np.testing.assert_array_equal(x, y)
