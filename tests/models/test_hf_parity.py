"""Logits parity with transformers (fp32) for every family, past position 64."""

import numpy as np
import pytest
import tiny_hf

from graft_jax.models import load_hf


def _assert_close(got, want):
  # 1e-4 relative to the logit scale, as the issue fixes it.
  scale = max(1.0, float(np.abs(want).max()))
  np.testing.assert_array_less(np.abs(np.asarray(got) - want).max(), 1e-4 * scale)


def test_logits_match_transformers(ckpt):
  model, cfg = load_hf(ckpt.path)
  assert cfg.model_type == ckpt.family
  ids = tiny_hf.random_ids(2, 96, seed=1)
  _assert_close(model(ids), tiny_hf.hf_logits(ckpt.hf_model, ids))


def test_family_features_are_exercised(ckpt):
  _, cfg = load_hf(ckpt.path)
  assert cfg.num_kv_heads < cfg.num_heads
  if ckpt.family == "smollm3":
    assert cfg.num_layers >= 4 and 0 in cfg.use_rope_layers and cfg.tie_word_embeddings
  if ckpt.family == "llama":
    assert cfg.rope_type == "llama3" and cfg.tie_word_embeddings
  if ckpt.family == "qwen3":
    assert cfg.qk_norm and not cfg.tie_word_embeddings
    assert cfg.head_dim != cfg.hidden_size // cfg.num_heads


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_rows_match_transformers_on_real_tokens(ckpt, side):
  model, _ = load_hf(ckpt.path)
  ids = tiny_hf.random_ids(2, 80, seed=2)
  lengths = [80, 67]
  padded = np.zeros_like(ids)
  mask = np.zeros(ids.shape, bool)
  for b, n in enumerate(lengths):
    cols = slice(0, n) if side == "right" else slice(80 - n, 80)
    padded[b, cols] = ids[b, :n]
    mask[b, cols] = True
  got = np.asarray(model(padded, mask))
  for b, n in enumerate(lengths):
    cols = slice(0, n) if side == "right" else slice(80 - n, 80)
    _assert_close(got[b, cols], tiny_hf.hf_logits(ckpt.hf_model, ids[b:b + 1, :n])[0])


def test_bf16_compute_with_fp32_master_params(ckpt):
  """bf16 compute is an approximation of the fp32 model, not a parity target."""
  import jax.numpy as jnp
  fp32, _ = load_hf(ckpt.path)
  mixed, _ = load_hf(ckpt.path, dtype=jnp.float32, compute_dtype=jnp.bfloat16)
  assert mixed.embedding_VxD.get_value().dtype == jnp.float32
  ids = tiny_hf.random_ids(2, 40, seed=4)
  want, got = np.asarray(fp32(ids)), np.asarray(mixed(ids))
  assert got.dtype == np.float32
  # bf16 keeps ~3 significant digits; errors compound over layers.
  assert np.abs(got - want).max() < 0.1 * np.abs(want).max()
  assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.9


@pytest.mark.parametrize("impl", ["dense", "blocked", "splash"])
def test_every_cpu_attention_implementation_matches_transformers(ckpt, impl):
  """Left-padded rows (the sampler's prefill) under each implementation that runs on
  a CPU ('splash' in the Pallas interpreter); 'cudnn' is checked on a GPU by
  launch/gpu_check.py."""
  model, _ = load_hf(ckpt.path)
  model.set_memory_options(attention=impl, attention_block=32)
  ids = tiny_hf.random_ids(2, 80, seed=3)
  lengths = [80, 51]
  padded, mask = np.zeros_like(ids), np.zeros(ids.shape, bool)
  for b, n in enumerate(lengths):
    padded[b, 80 - n:], mask[b, 80 - n:] = ids[b, :n], True
  got = np.asarray(model(padded, mask))
  for b, n in enumerate(lengths):
    _assert_close(got[b, 80 - n:], tiny_hf.hf_logits(ckpt.hf_model, ids[b:b + 1, :n])[0])
