import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from graft_jax.core import group_advantages, pooled_advantages, transfer_mask
from tests.core import reference


def test_golden_by_hand():
  # Group [1,0,0,0]: mean 0.25, sample std sqrt(0.1875/ (3/4)) = 0.5.
  adv = group_advantages(jnp.array([[1.0, 0.0, 0.0, 0.0]]), eps=0.0)
  np.testing.assert_allclose(adv, [[1.5, -0.5, -0.5, -0.5]], rtol=1e-6)


def test_dr_grpo_is_centered_only():
  adv = group_advantages(jnp.array([[1.0, 1.0, 0.0, 0.0]]), scale_by_std=False)
  np.testing.assert_allclose(adv, [[0.5, 0.5, -0.5, -0.5]], rtol=1e-6)


def test_uniform_groups_are_silent():
  adv = group_advantages(jnp.array([[0.0] * 8, [1.0] * 8]))
  assert np.all(np.asarray(adv) == 0.0)


@settings(max_examples=20, deadline=None)
@given(hnp.arrays(np.int8, hnp.array_shapes(min_dims=2, max_dims=2, min_side=2, max_side=9),
                  elements=st.integers(0, 1)),
       st.booleans())
def test_matches_numpy_and_sums_to_zero(rewards, scale):
  rewards = rewards.astype(np.float32)
  adv = np.asarray(group_advantages(rewards, scale_by_std=scale))
  np.testing.assert_allclose(adv, reference.grpo_adv(rewards, scale), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(adv.sum(axis=1), 0.0, atol=1e-4)


def test_jit_agrees():
  r = jax.random.bernoulli(jax.random.key(0), 0.4, (16, 8)).astype(jnp.float32)
  f = jax.jit(lambda x: group_advantages(x, scale_by_std=True))
  np.testing.assert_allclose(f(r), group_advantages(r), rtol=1e-6)


def test_mask_excludes_members():
  r = jnp.array([[1.0, 0.0, 0.0, 5.0]])
  adv = group_advantages(r, mask_GxN=jnp.array([[True, True, True, False]]), eps=0.0)
  expect = reference.grpo_adv(np.array([[1.0, 0.0, 0.0]]), eps=0.0)
  np.testing.assert_allclose(adv[0, :3], expect[0], rtol=1e-6)
  assert adv[0, 3] == 0.0


def test_pooled_against_numpy():
  own = np.zeros((1, 4), np.float32)
  peer = np.array([[1.0, 1.0, 0.0, 1.0]], np.float32)
  own_adv, peer_adv = pooled_advantages(own, peer, eps=0.0)
  union = np.concatenate([own, peer], axis=1)
  expect = reference.grpo_adv(union, eps=0.0)
  np.testing.assert_allclose(own_adv, expect[:, :4], rtol=1e-6)
  np.testing.assert_allclose(peer_adv, expect[:, 4:], rtol=1e-6)
  # Pooling with an all-fail group moves the peer's baseline down: 3/8 instead of 3/4.
  assert float(peer_adv[0, 2]) > float(reference.grpo_adv(peer, eps=0.0)[0, 2])


def test_transfer_mask():
  r = jnp.array([[1.0, 0.0, 1.0]])
  assert transfer_mask(r).tolist() == [[True, True, True]]
  assert transfer_mask(r, transfer="success_only").tolist() == [[True, False, True]]
