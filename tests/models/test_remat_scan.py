"""Remat on/off and scanned/unrolled blocks give the same losses and gradients."""

import functools

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.models.layer_stack import scan_period
from tests.models.model_grads import nll_and_grads

SMOLLM3 = ModelConfig(model_type="smollm3", vocab_size=97, hidden_size=32, intermediate_size=48,
                      num_layers=8, num_heads=4, num_kv_heads=2, head_dim=8,
                      use_rope_layers=(1, 1, 1, 0) * 2, tie_word_embeddings=True)
QWEN3 = ModelConfig(model_type="qwen3", vocab_size=97, hidden_size=32, intermediate_size=48,
                    num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


@functools.lru_cache(maxsize=None)
def loss_and_grads(cfg, remat, scan):
  model = init_model(cfg, rngs=nnx.Rngs(3))
  model.set_memory_options(remat=remat, scan_layers=scan)
  rng = np.random.default_rng(0)
  ids = jnp.asarray(rng.integers(0, cfg.vocab_size, (3, 20)), jnp.int32)
  mask = jnp.asarray(np.arange(20)[None] < np.array([[20], [13], [7]]))
  return nll_and_grads(model, ids, mask)


# Each case compiles a model and its gradient: a few seconds each on 2 cores.
@pytest.mark.parametrize("cfg,remat,scan", [
    (SMOLLM3, "full", False), (SMOLLM3, "none", True), (SMOLLM3, "dots_saveable", True),
    (QWEN3, "full", True), (QWEN3, "dots_no_batch", False)],
    ids=["smollm3-remat", "smollm3-scan", "smollm3-scan-dots", "qwen3-remat-scan", "qwen3-dots"])
def test_same_loss_and_gradients(cfg, remat, scan):
  want_loss, want_grads = loss_and_grads(cfg, "none", False)
  got_loss, got_grads = loss_and_grads(cfg, remat, scan)
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
  assert got_grads.keys() == want_grads.keys()
  for k, w in want_grads.items():
    np.testing.assert_allclose(got_grads[k], w, rtol=1e-5, atol=1e-7, err_msg=k)


def test_scan_period_follows_the_nope_pattern():
  gds = [nnx.split(b)[0] for b in init_model(SMOLLM3).layers]
  assert scan_period(gds) == 4
  assert scan_period([nnx.split(b)[0] for b in init_model(QWEN3).layers]) == 1
  assert scan_period(["a", "b", "a"]) == 3  # no period divides: one unrolled period


def test_unknown_remat_policy_is_refused():
  with pytest.raises(ValueError, match="remat must be"):
    init_model(QWEN3).set_memory_options(remat="everything")
