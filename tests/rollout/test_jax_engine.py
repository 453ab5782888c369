"""JaxSamplerEngine: transformers-equal greedy decoding, log-probs equal to teacher
forcing, reproducibility, EOS handling, bucketing and cheap weight swaps."""

import numpy as np
import pytest
import tiny_hf
import torch
from flax import nnx

from graft_jax.models import init_model, load_hf, pack_pairs, token_logprobs_jit
from graft_jax.rollout import JaxSamplerEngine, RolloutEngine, SamplingParams
from graft_jax.rollout.sampler import generate_padded

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 43))]
EOS, PAD = 2, 0


def _engine(ckpt):
  model, _ = load_hf(ckpt.path)
  return model, JaxSamplerEngine(model, eos_ids=EOS, pad_id=PAD)


def test_is_a_rollout_engine(ckpt_root):
  _, engine = _engine(tiny_hf.checkpoint("qwen3", ckpt_root))
  assert isinstance(engine, RolloutEngine)


def _assert_teacher_forced(model, batch, prompts, temperature):
  rows = range(len(batch.prompt_index_B))
  packed = pack_pairs([prompts[i] for i in batch.prompt_index_B],
                      [batch.response_ids(b) for b in rows], PAD)
  logp = token_logprobs_jit(model, packed.ids_BxT, packed.attn_mask_BxT,
                            temperature=temperature)
  for b, want in zip(rows, packed.responses(logp)):
    np.testing.assert_allclose(batch.logp_BxL[b, :batch.lengths_B[b]], want, atol=1e-4)


def test_greedy_equals_transformers_generate(ckpt):
  model, engine = _engine(ckpt)
  batch = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=30, temperature=0.0))
  for i, prompt in enumerate(PROMPTS):
    with torch.no_grad():
      out = ckpt.hf_model.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False,
                                   eos_token_id=EOS, pad_token_id=PAD)
    want = out[0, len(prompt):].tolist()
    assert batch.response_ids(2 * i) == batch.response_ids(2 * i + 1) == want
  # Greedy rows report log_softmax(logits), i.e. teacher forcing at T = 1.
  _assert_teacher_forced(model, batch, PROMPTS, 1.0)


def test_greedy_over_a_long_cache_is_the_uncached_argmax(ckpt):
  """64 new tokens, no EOS: every token is the argmax of the uncached forward pass
  over its prefix."""
  model, _ = _engine(ckpt)
  engine = JaxSamplerEngine(model, eos_ids=-1, pad_id=PAD)
  batch = engine.generate(PROMPTS, 1, SamplingParams(max_new_tokens=64, temperature=0.0))
  assert (batch.lengths_B == 64).all()
  for i, prompt in enumerate(PROMPTS):
    response = batch.response_ids(i)
    logits_TxV = np.asarray(model(np.asarray([prompt + response], np.int32)))[0]
    np.testing.assert_array_equal(logits_TxV[len(prompt) - 1:-1].argmax(-1), response)
  _assert_teacher_forced(model, batch, PROMPTS, 1.0)


def test_filtered_sample_logprobs_equal_teacher_forcing(ckpt):
  """Top-k/top-p pick the tokens; the recorded number stays log_softmax(logits / T)."""
  model, engine = _engine(ckpt)
  params = SamplingParams(max_new_tokens=30, temperature=0.8, top_k=12, top_p=0.9, seed=3)
  _assert_teacher_forced(model, engine.generate(PROMPTS, 2, params), PROMPTS, 0.8)


def test_same_key_same_samples_and_layout(ckpt_root):
  model, engine = _engine(tiny_hf.checkpoint("smollm3", ckpt_root))
  params = SamplingParams(max_new_tokens=20, temperature=1.0, seed=7)
  a = engine.generate(PROMPTS, 4, params)
  b = engine.generate(PROMPTS, 4, params)
  np.testing.assert_array_equal(a.tokens_BxL, b.tokens_BxL)
  np.testing.assert_array_equal(a.logp_BxL, b.logp_BxL)
  c = engine.generate(PROMPTS, 4, SamplingParams(max_new_tokens=20, temperature=1.0, seed=8))
  assert not np.array_equal(a.tokens_BxL, c.tokens_BxL)
  assert a.tokens_BxL.shape == (12, 20) and a.n == 4
  np.testing.assert_array_equal(a.prompt_index_B, np.repeat([0, 1, 2], 4))
  # Samples of one prompt differ from each other.
  assert len({tuple(a.tokens_BxL[j]) for j in range(4)}) > 1
  _assert_teacher_forced(model, a, PROMPTS, 1.0)


def test_eos_ends_rows_and_flags_agree():
  from graft_jax.models import ModelConfig
  cfg = ModelConfig(model_type="llama", vocab_size=8, hidden_size=16, intermediate_size=32,
                    num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8)
  model = init_model(cfg, rngs=nnx.Rngs(1))
  # A tiny vocabulary with EOS = 3 makes early stops common.
  engine = JaxSamplerEngine(model, eos_ids=[3], pad_id=0)
  batch = engine.generate([[1, 2], [4]], 16, SamplingParams(max_new_tokens=12, seed=0))
  lengths = batch.lengths_B
  assert batch.finished_B.any() and batch.truncated_B.any()
  np.testing.assert_array_equal(batch.finished_B, ~batch.truncated_B)
  for b in range(len(lengths)):
    ids = batch.tokens_BxL[b]
    n = lengths[b]
    assert (3 in ids[:n]) == batch.finished_B[b]
    if batch.finished_B[b]:
      assert ids[n - 1] == 3 and 3 not in ids[:n - 1]
    else:
      assert n == 12
    assert np.all(ids[n:] == 0) and np.all(batch.logp_BxL[b, n:] == 0)
    assert np.all(batch.logp_BxL[b, :n] < 0)


def test_buckets_and_weight_swaps_do_not_recompile(ckpt_root):
  model, engine = _engine(tiny_hf.checkpoint("llama", ckpt_root))
  params = SamplingParams(max_new_tokens=10, temperature=0.0)
  first = engine.generate([[5, 6, 7]], 2, params)
  compiled = generate_padded._cache_size()
  engine.generate([[8, 9, 10, 11, 12]], 2, SamplingParams(max_new_tokens=12, temperature=0.0))
  other = init_model(model.cfg, rngs=nnx.Rngs(5))
  engine.set_weights(other)
  swapped = engine.generate([[5, 6, 7]], 2, params)
  engine.set_weights(nnx.state(model))
  restored = engine.generate([[5, 6, 7]], 2, params)
  assert generate_padded._cache_size() == compiled
  assert not np.array_equal(first.tokens_BxL, swapped.tokens_BxL)
  np.testing.assert_array_equal(first.tokens_BxL, restored.tokens_BxL)


def test_rejects_empty_prompts(ckpt_root):
  _, engine = _engine(tiny_hf.checkpoint("qwen3", ckpt_root))
  with pytest.raises(ValueError, match="prompt 1 is empty"):
    engine.generate([[4], []], 1, SamplingParams())
