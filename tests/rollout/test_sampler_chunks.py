"""The JAX sampler under a KV-cache budget: chunked decoding samples what one call does,
and a budget below one prompt stops with a clear error."""

import dataclasses

import numpy as np
import pytest
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.rollout.kv_budget import (KVBudgetError, call_plan, kv_bytes_per_prompt,
                                         prompts_per_chunk)
from graft_jax.rollout.sampler import generate_padded

CFG = ModelConfig(model_type="smollm3", vocab_size=61, hidden_size=32, intermediate_size=48,
                  num_layers=4, num_heads=4, num_kv_heads=2, head_dim=8,
                  use_rope_layers=(1, 1, 1, 0), tie_word_embeddings=True)
EOS, PAD = 2, 0
# Five prompts (bucketed to 8), 3 samples each, prompt bucket 16, new-token bucket 16.
PROMPTS = [[5, 6, 7], [10, 11], list(range(3, 17)), [9], [4, 4, 4, 4, 8]]
N = 3
PER_PROMPT = kv_bytes_per_prompt(CFG, n=N, slots=32, itemsize=4)


def _generate(max_kv_bytes, params, attention="dense"):
  model = init_model(CFG, rngs=nnx.Rngs(2))
  model.set_memory_options(attention=attention, attention_block=4)
  engine = JaxSamplerEngine(model, eos_ids=EOS, pad_id=PAD, max_kv_bytes=max_kv_bytes)
  return engine.generate(PROMPTS, N, params)


@pytest.mark.parametrize("params", [
    SamplingParams(max_new_tokens=12, temperature=1.0, seed=4),
    SamplingParams(max_new_tokens=12, temperature=0.7, top_k=9, top_p=0.8, seed=1)],
    ids=["plain", "filtered"])
def test_chunked_decode_equals_one_call(params):
  generate_padded.clear_cache()  # counted from none: another test may compile the whole call
  whole = _generate(0, params)
  compiled_whole = generate_padded._cache_size()
  for chunk in (1, 4):  # 5 calls, and 2 (the last one mostly filler)
    got = _generate(chunk * PER_PROMPT + PER_PROMPT // 2, params)
    for field in ("tokens_BxL", "mask_BxL", "finished_B", "truncated_B", "prompt_index_B"):
      np.testing.assert_array_equal(getattr(got, field), getattr(whole, field), err_msg=field)
    np.testing.assert_allclose(got.logp_BxL, whole.logp_BxL, rtol=1e-6, atol=1e-6)
  assert compiled_whole == 1
  assert generate_padded._cache_size() == 3  # one program per chunk size
  assert len(set(map(tuple, whole.tokens_BxL.tolist()))) > 1  # the rows really differ


def test_blocked_prefill_samples_what_dense_does():
  params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=6)
  want, got = _generate(0, params), _generate(2 * PER_PROMPT, params, attention="blocked")
  np.testing.assert_array_equal(got.tokens_BxL, want.tokens_BxL)
  np.testing.assert_allclose(got.logp_BxL, want.logp_BxL, rtol=1e-5, atol=1e-5)


def test_budget_below_one_prompt_is_one_clear_error():
  with pytest.raises(KVBudgetError, match=r"max_kv_bytes .* vLLM engine \(--config.engine=vllm\)"):
    _generate(PER_PROMPT - 1, SamplingParams(max_new_tokens=12))


def test_kv_bytes_by_hand():
  # 4 layers x (K + V) x 2 kv heads x 8 dims x 32 slots x 4 bytes, for 3 rows + 1 prefill.
  assert PER_PROMPT == 4 * 2 * 2 * 8 * 32 * 4 * (N + 1)
  wide = dataclasses.replace(CFG, num_kv_heads=4, num_heads=8)
  assert kv_bytes_per_prompt(wide, n=N, slots=32, itemsize=2) == PER_PROMPT
  assert prompts_per_chunk(8, 100, 0) == 8
  assert prompts_per_chunk(8, 100, 799) == 4
  assert prompts_per_chunk(8, 100, 800) == 8
  assert prompts_per_chunk(8, 100, 100) == 1


def test_call_plan_by_hand():
  # (prompt bucket, prompts per call); the budget is per device, rows split row_shards ways.
  assert call_plan(6, 100, 0) == (8, 8)  # no budget: one call of the power-of-two bucket
  assert call_plan(3, 100, 0, min_bucket=16) == (16, 16)
  assert call_plan(6, 100, 250, row_shards=4) == (8, 8)  # 2 prompts x 100 B per device
  assert call_plan(6, 100, 150, row_shards=4) == (8, 4)  # 1 prompt per device and call
  # Split 3 ways: the bucket 8 becomes 9; 300 B fit 3 prompts, 2 as a power of two, and a
  # call is at least one prompt per device: 3.
  assert call_plan(6, 100, 100, row_shards=3) == (9, 3)
  with pytest.raises(KVBudgetError):
    call_plan(6, 100, 50, row_shards=4)  # one prompt exceeds a device's budget
