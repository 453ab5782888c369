"""Blocked (flash-style) attention gives the dense attention's logits and gradients, in less memory."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graft_jax.models import token_logprobs
from graft_jax.models.attention import blocked_attention, dense_attention
from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.rollout.sampler import prefill
from tests.models.model_grads import nll_and_grads

# GQA 4:2 with a NoPE layer (SmolLM3's pattern), and GQA 4:1 with q/k norm (Qwen3).
SMOLLM3 = ModelConfig(model_type="smollm3", vocab_size=97, hidden_size=32, intermediate_size=48,
                      num_layers=4, num_heads=4, num_kv_heads=2, head_dim=8,
                      use_rope_layers=(1, 1, 1, 0), tie_word_embeddings=True)
QWEN3 = ModelConfig(model_type="qwen3", vocab_size=97, hidden_size=32, intermediate_size=48,
                    num_layers=2, num_heads=4, num_kv_heads=1, head_dim=16, qk_norm=True)
T = 37  # not a multiple of the block: the last block is padded


def _batch(side: str):
  """Rows of 37, 30, 9 and 1 real tokens, padded on `side`."""
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 97, (4, T)).astype(np.int32)
  lengths = np.array([T, 30, 9, 1])
  cols = np.arange(T)[None]
  mask = cols < lengths[:, None] if side == "right" else cols >= T - lengths[:, None]
  return jnp.asarray(ids), jnp.asarray(mask)


def _model(cfg, impl, block=8, **kw):
  model = init_model(cfg, rngs=nnx.Rngs(5))
  model.set_memory_options(attention=impl, attention_block=block, **kw)
  return model


@pytest.mark.parametrize("cfg", [SMOLLM3, QWEN3], ids=["smollm3", "qwen3"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_blocked_logits_equal_dense(cfg, side):
  ids, mask = _batch(side)
  want = np.asarray(_model(cfg, "dense")(ids, mask))
  for block in (8, 64):  # several blocks, and one block holding all of T
    got = np.asarray(_model(cfg, "blocked", block)(ids, mask))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@functools.lru_cache(maxsize=None)
def _loss_and_grads(cfg, impl, remat="none", scan=False):
  return nll_and_grads(_model(cfg, impl, remat=remat, scan_layers=scan), *_batch("left"))


@pytest.mark.parametrize("cfg,remat,scan", [(SMOLLM3, "full", True), (QWEN3, "none", False)],
                         ids=["smollm3-remat-scan", "qwen3"])
def test_blocked_gradients_equal_dense(cfg, remat, scan):
  want_loss, want_grads = _loss_and_grads(cfg, "dense")
  got_loss, got_grads = _loss_and_grads(cfg, "blocked", remat, scan)
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
  assert got_grads.keys() == want_grads.keys()
  for k, w in want_grads.items():
    np.testing.assert_allclose(got_grads[k], w, rtol=1e-5, atol=1e-6, err_msg=k)


def test_kernel_gradients_equal_dense_with_an_empty_row():
  """q, k, v gradients of the kernels alone, with GQA 6:2 and a row with no real key."""
  rng = np.random.default_rng(1)
  q = jnp.asarray(rng.normal(size=(3, 21, 2, 3, 8)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(3, 21, 2, 8)), jnp.float32) for _ in range(2))
  mask = jnp.asarray(np.arange(21)[None] >= np.array([[0], [11], [21]]))
  w = jnp.asarray(rng.normal(size=q.shape), jnp.float32)
  grads = lambda f: jax.grad(lambda q, k, v: (f(q, k, v, mask) * w).sum(), argnums=(0, 1, 2))(
      q, k, v)
  want = grads(dense_attention)
  got = grads(functools.partial(blocked_attention, block=4))
  for g, x in zip(got, want):
    np.testing.assert_allclose(g, x, rtol=1e-5, atol=1e-6)
  assert not np.asarray(blocked_attention(q, k, v, mask, block=4)[2]).any()  # no key: 0


def test_blocked_prefill_equals_dense_prefill():
  """The sampler's prefill: last logits and the cache it hands to decoding."""
  ids, mask = _batch("left")
  outs = [prefill(_model(SMOLLM3, impl), ids, mask, 8) for impl in ("dense", "blocked")]
  (want_logits, want_cache, *_), (got_logits, got_cache, *_) = outs
  np.testing.assert_allclose(got_logits, want_logits, rtol=1e-5, atol=1e-5)
  real = np.asarray(mask)[:, None, None, :]  # cache slots of real prompt tokens
  for (gk, gv), (wk, wv) in zip(got_cache, want_cache):
    np.testing.assert_allclose(np.where(real, gk[..., :T], 0), np.where(real, wk[..., :T], 0),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.where(real[:, :, 0, :, None], gv[:, :, :T], 0),
                               np.where(real[:, :, 0, :, None], wv[:, :, :T], 0),
                               rtol=1e-5, atol=1e-5)


def _temp_bytes(impl: str, length: int) -> int:
  """XLA's temporary bytes of one row's forward + backward at `length` tokens (compiled, not run)."""
  cfg = ModelConfig(model_type="qwen3", vocab_size=64, hidden_size=64, intermediate_size=64,
                    num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True)
  model = nnx.eval_shape(lambda: _model(cfg, impl, block=256))
  graphdef, state = nnx.split(model)
  ids = jax.ShapeDtypeStruct((1, length), jnp.int32)
  mask = jax.ShapeDtypeStruct((1, length), jnp.bool_)

  def loss(state, ids, mask):
    return token_logprobs(nnx.merge(graphdef, state), ids, mask).sum()

  compiled = jax.jit(jax.grad(loss)).lower(state, ids, mask).compile()
  return int(compiled.memory_analysis().temp_size_in_bytes)


def test_blocked_temporaries_far_below_dense_at_2048_tokens():
  dense, blocked = _temp_bytes("dense", 2048), _temp_bytes("blocked", 2048)
  # Dense keeps 4 heads x 2048^2 fp32 scores (64 MiB) per layer for the backward pass.
  assert dense > 4 * 2048 * 2048 * 4
  assert blocked * 8 < dense, (blocked, dense)
