"""The worked example of docs/adding_a_method.md: GRAFT's rows with pi / (pi + gamma) on
grafted tokens. Its loss against a float64 NumPy one (value and gradient), its setting
checked, and two steps on the toy pair."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import toy
from graft_jax.config import run_config as config_lib
from graft_jax.train import methods
from graft_jax.train import step as step_lib
from graft_jax.train.methods.base import PpoBatch
from graft_jax.train.methods.luffy import ShapedTokenLoss
from graft_jax.train.policy import make_policy
from tests.core import reference
from tests.train import tiny_pair

GAMMA = 0.1
LOGP = np.log([[0.5, 0.9, 0.2], [0.3, 0.6, 0.8], [0.05, 0.7, 0.4], [0.9, 0.01, 0.5]])
OLD = np.log([[0.5, 0.5, 0.3], [0.3, 0.9, 0.5], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
ADV, WEIGHT = np.array([1.0, -0.5, 0.8, -1.2]), np.array([1.0, 1.0, 0.9, 0.6])
GRAFTED = np.array([0.0, 0.0, 1.0, 1.0])
MASK = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 1]], np.float64)


def numpy_loss(logp):
  """The clipped loss over own tokens and -w A p / (p + gamma) over grafted ones, both
  divided by every token's count."""
  own = GRAFTED == 0
  n = MASK.sum()
  clipped = reference.token_loss(logp[own], OLD[own], ADV[own], WEIGHT[own], MASK[own])
  p = np.exp(logp[~own])
  shaped = (p / (p + GAMMA) * MASK[~own]).sum(axis=1)
  return clipped * MASK[own].sum() / n - (WEIGHT[~own] * ADV[~own] * shaped).sum() / n


def test_the_loss_and_its_gradient_match_numpy():
  batch = PpoBatch(ids=jnp.zeros((4, 3), jnp.int32), attn=jnp.ones((4, 3), bool),
                   resp_mask=jnp.asarray(MASK, jnp.float32), old_logp=jnp.asarray(OLD, jnp.float32),
                   adv=jnp.asarray(ADV, jnp.float32), weight=jnp.asarray(WEIGHT, jnp.float32),
                   grafted=jnp.asarray(GRAFTED, jnp.float32), ppo=jnp.ones(4), sgt=jnp.zeros(4))
  loss = ShapedTokenLoss(gamma=GAMMA)
  totals = {k: jnp.float32(v) for k, v in loss.totals(batch).items()}
  value, grad = jax.value_and_grad(lambda lp: loss(lp, batch, totals, 0)[0])(
      jnp.asarray(LOGP, jnp.float32))
  np.testing.assert_allclose(float(value), numpy_loss(LOGP), rtol=1e-5)
  eps, want = 1e-6, np.zeros_like(LOGP)
  for i, j in np.ndindex(*LOGP.shape):
    step = np.zeros_like(LOGP)
    step[i, j] = eps
    want[i, j] = (numpy_loss(LOGP + step) - numpy_loss(LOGP - step)) / (2 * eps)
  np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-4, atol=1e-6)
  assert np.abs(want[2:]).max() > 1e-2  # the grafted tokens move


def luffy_config(**overrides):
  cd = toy.get_config("luffy")
  with cd.unlocked():
    cd.prompts_per_step, cd.n, cd.num_minibatches = 8, 4, 2
    cd.max_prompt_len, cd.max_response_len = 40, 8
    cd.optimizer.lr = 1e-3
    for k, v in overrides.items():
      config_lib.apply_overrides(cd, [f"{k}={v}"])
  return methods.from_config_dict(cd)


def test_gamma_is_checked_as_the_method_loads():
  with pytest.raises(config_lib.ConfigError, match=r"^luffy.gamma must be > 0, got 0.0$"):
    luffy_config(**{"luffy.gamma": 0.0})


def test_two_steps_on_the_toy_pair():
  cfg = luffy_config(**{"luffy.gamma": 0.05})
  method = methods.make(cfg)
  assert method.loss_fn.gamma == 0.05 and method.loss_fn.clip_high == cfg.clip_high
  models = tiny_pair.make_models()
  policies = {name: make_policy(name, *models[key], cfg.optimizer, cfg.data.prompt_suffix)
              for name, key in (("toy_a", "a"), ("toy_b", "b"))}
  before = {n: jax.tree.map(np.asarray, p.params) for n, p in policies.items()}
  data = tiny_pair.problems(16, seed=5)
  for step in range(2):
    metrics, _ = step_lib.train_step(cfg, policies, data[8 * step:8 * step + 8],
                                     tiny_pair.contains_reward, step, jax.random.key(step),
                                     method=method)
    for name in policies:
      update = metrics[name]["update"]
      assert update["minibatch_updates"] == 2
      assert np.isfinite(update["grad_norm"]) and np.isfinite(update.get("shaped_loss", 0.0))
  for name, p in policies.items():
    moved = [np.abs(np.asarray(a) - b).max() for a, b in
             zip(jax.tree.leaves(p.params), jax.tree.leaves(before[name]))]
    assert max(moved) > 0
