import jax
import jax.numpy as jnp
import numpy as np

from graft_jax.core import capability_ratio, hacpo_advantages, hacpo_policy_loss, low_var_kl


def _ref_adv(r, is_self, c, eps=1e-6):
  """Loop reference of the capability-aware baseline (paper Eqs. 5-6, reference-code guards)."""
  r = np.asarray(r, np.float64)
  out = np.zeros_like(r)
  for g in range(r.shape[0]):
    row = r[g]
    if len(set(row.tolist())) == 1:
      b = row.mean()
    else:
      b = np.mean([row[i] / (1.0 if is_self[g][i] else c[g][i]) for i in range(len(row))])
      if b > 1.0:
        b = np.mean([row[i] for i in range(len(row)) if is_self[g][i]])
    out[g] = (row - b) / (row.std(ddof=1) + eps)
  return out


def test_capability_ratio_clamped():
  np.testing.assert_allclose(capability_ratio(jnp.array([0.5, 0.01, 0.9]), 0.05),
                             [10.0, 0.2, 10.0], rtol=1e-6)
  np.testing.assert_allclose(capability_ratio(0.2, 0.4), 0.5, rtol=1e-6)


def test_advantages_against_loop_reference():
  rng = np.random.default_rng(0)
  r = (rng.uniform(size=(6, 8)) < 0.4).astype(np.float32)
  r[0] = 0  # uniform group
  is_self = np.tile(np.array([1, 1, 1, 1, 0, 0, 0, 0], bool), (6, 1))
  c = np.full((6, 8), 0.5, np.float32)  # peer half as capable -> its successes count double
  adv, _ = hacpo_advantages(r, is_self, c)
  np.testing.assert_allclose(adv, _ref_adv(r, is_self, c), rtol=1e-5, atol=1e-6)


def test_baseline_guard():
  # Self 1/4, peer 4/4 with c=0.1 -> weighted mean (1+4*10)/8 > 1 -> self mean 0.25.
  r = np.array([[1, 0, 0, 0, 1, 1, 1, 1]], np.float32)
  is_self = np.array([[1, 1, 1, 1, 0, 0, 0, 0]], bool)
  _, base = hacpo_advantages(r, is_self, np.full((1, 8), 0.1, np.float32))
  np.testing.assert_allclose(base, [0.25], rtol=1e-6)


def test_policy_loss_golden():
  # Row 0 self, s = e^{0.1} -> clipped to 1+4e-4 for A>0.
  # Row 1 cross, s = e^{-0.5}=0.6065 -> clip to lower 0.8 (m=0): 0.8*0.8*c*A.
  logp = jnp.array([[-0.9, -0.9], [-1.5, -1.5]])
  mask = jnp.ones((2, 2))
  src = jnp.array([-1.0, -1.0])
  loss, aux = hacpo_policy_loss(logp, mask, src, jnp.array([1.0, 2.0]),
                                jnp.array([True, False]), jnp.array([1.0, 0.5]))
  want = -((1 + 4e-4) * 1.0 + 0.8 * 0.8 * 0.5 * 2.0) / 2
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)
  assert float(aux["cross_clip_lower_frac"]) == 1.0
  # Lower bound rises with the update index: 1-0.2+0.025*4 = 0.9.
  loss4, _ = hacpo_policy_loss(logp, mask, src, jnp.array([1.0, 2.0]),
                               jnp.array([True, False]), jnp.array([1.0, 0.5]), update_index=4)
  np.testing.assert_allclose(float(loss4), -((1 + 4e-4) + 0.9 * 0.9 * 0.5 * 2.0) / 2, rtol=1e-5)


def test_cross_gradient_uses_detached_factor():
  # Unclipped cross ratio s in (lower, 1): d/dl [s * sg(s) c A] = s^2 c A / |o| per token.
  logp = jnp.array([[-1.1, -1.1]])
  src = jnp.array([-1.0])
  g = jax.grad(lambda x: hacpo_policy_loss(x, jnp.ones((1, 2)), src, jnp.array([1.0]),
                                            jnp.array([False]), jnp.array([2.0]))[0])(logp)
  s = np.exp(-0.1)
  np.testing.assert_allclose(np.asarray(g), [[-s * s * 2.0 / 2] * 2], rtol=1e-5)


def test_low_var_kl():
  logp = jnp.array([[-1.0, -2.0], [-1.0, 0.0]])
  ref = jnp.array([[-1.5, -2.0], [-1.0, 0.0]])
  mask = jnp.array([[1, 1], [1, 0]])
  d = -0.5
  want = ((np.exp(d) - d - 1) / 2 + 0.0) / 2
  np.testing.assert_allclose(float(low_var_kl(logp, ref, mask)), want, rtol=1e-6)
