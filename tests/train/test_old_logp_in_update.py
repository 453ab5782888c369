"""One update per batch of rollouts: the old log-probs come from the update's own forward pass.

With the old log-probs taken as the stop-gradient of the same forward, the
loss and gradient must equal those of the separate teacher-forced pass, the
loss must be the ratio-1 surrogate computed here by hand, and the update must
report the sampler / old-policy gap over the own tokens.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import toy
from graft_jax.models import ModelConfig, init_model
from graft_jax.train import config as config_lib
from graft_jax.train import microbatch
from graft_jax.train.update_rows import Rows, pack_minibatch
from graft_jax.train.scoring import score_rows
from graft_jax.train.step import loss_spec, old_logp_in_update
from graft_jax.train.update import LossSpec, loss_fn

CFG = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=32, intermediate_size=48,
                  num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, qk_norm=True)


def rows_and_model(noise: float):
  """Three own groups and a grafted one (weights < 1); old log-probs are the model's
  teacher-forced ones plus ``noise`` (what a sampler with other numerics would record)."""
  rng = np.random.default_rng(0)
  model = init_model(CFG, rngs=nnx.Rngs(2))
  prompts = [rng.integers(1, 61, rng.integers(3, 9)).tolist() for _ in range(16)]
  responses = [rng.integers(1, 61, rng.integers(1, 20)).tolist() for _ in range(16)]
  teacher = score_rows(model, prompts, responses, pad_id=0)
  rows = Rows()
  for i, (p, r) in enumerate(zip(prompts, responses)):
    grafted = i >= 12
    rows.add(p, r, i // 4, adv=rng.normal(), weight=0.9 if grafted else 1.0, grafted=grafted,
             old_logp=teacher[i] + noise * rng.standard_normal(len(r)))
  return model, rows, teacher


def loss_and_grads(model, batch, spec):
  graphdef, params = nnx.split(model)
  f = jax.jit(lambda p, b: jax.value_and_grad(loss_fn, has_aux=True)(p, b, graphdef, spec, 0))
  (loss, metrics), grads = f(params, jax.device_put(batch))
  return float(loss), jax.device_get(metrics), [np.asarray(g) for g in jax.tree.leaves(grads)]


def test_same_loss_and_gradient_as_the_separate_pass():
  model, rows, _ = rows_and_model(noise=0.0)
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  want_loss, _, want = loss_and_grads(model, batch, LossSpec())
  noisy = pack_minibatch(rows_and_model(noise=0.3)[1], np.arange(16), pad_id=0)
  got_loss, metrics, got = loss_and_grads(model, noisy, LossSpec(old_from_current=True))
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
  scale = max(float(np.abs(w).max()) for w in want)
  assert scale > 1e-4
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=0, atol=1e-5 * scale)
  # Ratio 1 everywhere: L = -sum_j w_j A_j |o_j| / sum_j |o_j|, by hand.
  lens = np.array([len(r) for r in rows.response_ids], np.float64)
  by_hand = -np.sum(np.array(rows.weight) * np.array(rows.adv) * lens) / lens.sum()
  np.testing.assert_allclose(got_loss, by_hand, rtol=1e-5)
  assert metrics["clip_frac_low"] == metrics["clip_frac_high"] == 0.0


def test_reports_the_sampler_gap_over_own_tokens():
  model, rows, teacher = rows_and_model(noise=0.3)
  batch = pack_minibatch(rows, np.arange(16), pad_id=0)
  _, metrics, _ = loss_and_grads(model, batch, LossSpec(old_from_current=True))
  gaps = np.concatenate([np.abs(rows.old_logp[i] - teacher[i]) for i in range(12)])
  np.testing.assert_allclose(metrics["logp_mismatch_mean"], gaps.mean(), rtol=1e-4)
  np.testing.assert_allclose(metrics["logp_mismatch_max"], gaps.max(), rtol=1e-4)


def test_micro_batches_give_the_same_gradient_and_gap():
  model, rows, teacher = rows_and_model(noise=0.3)
  graphdef, params = nnx.split(model)
  batch = pack_minibatch(rows, np.arange(16), pad_id=0)
  spec = LossSpec(old_from_current=True)
  _, _, want = loss_and_grads(model, batch, spec)
  micro = microbatch.split_minibatch(batch, 5)
  got, metrics = jax.jit(lambda p, m: microbatch.accumulated_grads(
      p, m, 0, graphdef=graphdef, spec=spec))(params, micro)
  scale = max(float(np.abs(w).max()) for w in want)
  for g, w in zip(jax.tree.leaves(got), want):
    np.testing.assert_allclose(np.asarray(g), w, rtol=0, atol=1e-5 * scale)
  # The gap over the own tokens (rows 0..11) of all micro-batches: maxima by maximum.
  gaps = np.concatenate([np.abs(rows.old_logp[i] - teacher[i]) for i in range(12)])
  np.testing.assert_allclose(metrics["logp_mismatch_mean"], gaps.mean(), rtol=1e-4)
  np.testing.assert_allclose(metrics["logp_mismatch_max"], gaps.max(), rtol=1e-4)


@pytest.mark.parametrize("overrides,want", [
    ({}, True),
    ({"num_minibatches": 2}, False),
    ({"ppo_epochs": 2}, False),
    ({"old_logp_source": "sampler"}, False),
    ({"method": "hacpo"}, False),
])
def test_only_with_one_update_per_batch_of_rollouts(overrides, want):
  cd = toy.get_config("grpo")
  with cd.unlocked():
    cd.num_minibatches = 1
    cd.hacpo.minibatch_prompts = cd.prompts_per_step
    for k, v in overrides.items():
      cd[k] = v
  cfg = config_lib.from_config_dict(cd)
  assert old_logp_in_update(cfg, cfg.prompts_per_step) is want
  assert loss_spec(cfg).old_from_current is want
