import jax
import jax.numpy as jnp
import numpy as np

from graft_jax.core import sgt_nll, sgt_select


def test_select_rule_and_uniform_pick():
  k_recv = np.array([0, 0, 2, 0])
  peer = np.array([[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]], np.float32)
  seen = set()
  for s in range(64):
    pick, active = sgt_select(k_recv, peer, jax.random.key(s))
    assert np.asarray(active).tolist() == [True, False, False, True]
    assert peer[0, int(pick[0])] == 1 and peer[3, int(pick[3])] == 1
    seen.add(int(pick[0]))
  assert seen == {1, 3}  # both correct responses get drawn


def test_nll_golden():
  logp = jnp.array([[-1.0, -2.0, 0.0], [-4.0, -4.0, -4.0], [-0.5, 0.0, 0.0]])
  mask = jnp.array([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
  loss, count = sgt_nll(logp, mask, jnp.array([True, False, True]), coef=0.1)
  np.testing.assert_allclose(float(loss), 0.1 * (1 + 2 + 0.5) / 3, rtol=1e-6)
  assert float(count) == 3
  zero, _ = sgt_nll(logp, mask, jnp.zeros(3, bool))
  assert float(zero) == 0.0
