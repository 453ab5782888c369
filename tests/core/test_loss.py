import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from graft_jax.core import clipped_token_loss
from tests.core import reference


def _batch(seed, b=4, t=6):
  rng = np.random.default_rng(seed)
  old = rng.normal(-1.5, 0.5, (b, t)).astype(np.float32)
  logp = (old + rng.normal(0, 0.3, (b, t))).astype(np.float32)
  adv = rng.normal(0, 1, b).astype(np.float32)
  w = rng.uniform(0.5, 1.0, b).astype(np.float32)
  mask = (rng.uniform(size=(b, t)) < 0.8).astype(np.float32)
  mask[:, 0] = 1
  return logp, old, adv, w, mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_matches_numpy_reference(seed, level):
  logp, old, adv, w, mask = _batch(seed)
  loss, _ = clipped_token_loss(logp, old, adv, w, mask, ratio_level=level)
  want = reference.token_loss(logp, old, adv, w, mask, sequence=level == "sequence")
  np.testing.assert_allclose(float(loss), want, rtol=1e-5, atol=1e-6)


def test_on_policy_loss_is_minus_weighted_token_mean_advantage():
  _, old, adv, w, mask = _batch(7)
  loss, aux = clipped_token_loss(old, old, adv, w, mask)
  lengths = mask.sum(axis=1)
  want = -(w * adv * lengths).sum() / lengths.sum()
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)
  assert float(aux["clip_frac_low"]) == 0.0 and float(aux["clip_frac_high"]) == 0.0
  np.testing.assert_allclose(float(aux["ratio_mean"]), 1.0, rtol=1e-6)
  assert float(aux["token_count"]) == mask.sum()


def test_golden_by_hand_with_clipping():
  # Token ratios e^{0.5}=1.649 (clipped to 1.28 for A>0) and e^{-0.5}=0.607
  # (min with clip 0.8 for A<0 picks 0.8*A=-0.8). Masked token ignored.
  logp = jnp.array([[0.5, 0.0, 9.0], [-0.5, 0.0, 0.0]])
  old = jnp.zeros((2, 3))
  adv = jnp.array([1.0, -1.0])
  w = jnp.array([1.0, 0.5])
  mask = jnp.array([[1, 1, 0], [1, 1, 1]])
  loss, aux = clipped_token_loss(logp, old, adv, w, mask)
  want = -((1.28 + 1.0) * 1.0 + (-0.8 - 1.0 - 1.0) * 0.5) / 5.0
  np.testing.assert_allclose(float(loss), want, rtol=1e-6)
  assert np.asarray(aux["clip_high_count_B"]).tolist() == [1, 0]
  assert np.asarray(aux["clip_low_count_B"]).tolist() == [0, 1]


def _fd_grad(f, x, h=1e-2):
  g = np.zeros_like(x)
  for idx in np.ndindex(x.shape):
    xp, xm = x.copy(), x.copy()
    xp[idx] += h
    xm[idx] -= h
    g[idx] = (f(xp) - f(xm)) / (2 * h)
  return g


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_gradient_matches_finite_differences(level):
  logp, old, adv, w, mask = _batch(3, b=3, t=4)
  f = lambda x: float(clipped_token_loss(x, old, adv, w, mask, ratio_level=level)[0])
  g = jax.grad(lambda x: clipped_token_loss(x, old, adv, w, mask, ratio_level=level)[0])(logp)
  # Finite differences in float64 on the reference, away from clip kinks.
  ref = lambda x: reference.token_loss(x, old, adv, w, mask, sequence=level == "sequence")
  np.testing.assert_allclose(np.asarray(g), _fd_grad(ref, logp.astype(np.float64), 1e-5),
                             rtol=1e-3, atol=1e-5)
  del f


def test_clipped_tokens_have_zero_gradient():
  logp = jnp.array([[0.6, 0.0], [-0.6, 0.0]])  # ratios 1.82 (A>0) and 0.55 (A<0)
  old = jnp.zeros((2, 2))
  adv = jnp.array([1.0, -1.0])
  g = jax.grad(lambda x: clipped_token_loss(x, old, adv, jnp.ones(2), jnp.ones((2, 2)))[0])(logp)
  assert float(g[0, 0]) == 0.0 and float(g[1, 0]) == 0.0
  # The unclipped side keeps its gradient: -w*A*rho/|tokens| at rho=1.
  np.testing.assert_allclose(np.asarray(g[:, 1]), [-0.25, 0.25], rtol=1e-6)


def test_masked_tokens_and_dropped_rows_carry_no_gradient():
  logp, old, adv, w, mask = _batch(5)
  mask[2] = 0
  g = jax.grad(lambda x: clipped_token_loss(x, old, adv, w, mask)[0])(logp)
  assert np.all(np.asarray(g)[mask == 0] == 0)


def test_num_tokens_makes_microbatches_add_up():
  logp, old, adv, w, mask = _batch(11, b=6)
  full, _ = clipped_token_loss(logp, old, adv, w, mask)
  n = mask.sum()
  parts = [clipped_token_loss(logp[s], old[s], adv[s], w[s], mask[s], num_tokens=n)[0]
           for s in (slice(0, 2), slice(2, 6))]
  np.testing.assert_allclose(float(sum(parts)), float(full), rtol=1e-5)


def test_jit_agrees():
  logp, old, adv, w, mask = _batch(2)
  f = jax.jit(lambda *a: clipped_token_loss(*a, clip_low=0.2, clip_high=0.28))
  np.testing.assert_allclose(f(logp, old, adv, w, mask)[0],
                             clipped_token_loss(logp, old, adv, w, mask)[0], rtol=1e-6)


def test_bad_ratio_level():
  with pytest.raises(ValueError, match="ratio_level"):
    clipped_token_loss(*_batch(0), ratio_level="tokens")


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 10_000))
def test_property_random_shapes(b, t, seed):
  rng = np.random.default_rng(seed)
  old = rng.normal(-1, 0.5, (b, t))
  logp = old + rng.normal(0, 0.4, (b, t))
  adv = rng.normal(0, 1, b)
  w = rng.uniform(0, 1, b)
  mask = (rng.uniform(size=(b, t)) < 0.7).astype(np.float64)
  loss, aux = clipped_token_loss(logp, old, adv, w, mask)
  np.testing.assert_allclose(float(loss), reference.token_loss(logp, old, adv, w, mask),
                             rtol=1e-4, atol=1e-5)
  assert 0.0 <= float(aux["clip_frac_low"]) + float(aux["clip_frac_high"]) <= 1.0
