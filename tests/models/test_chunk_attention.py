"""`chunk_attention`: a prefill chunk's attention over a cache against float64 NumPy,
reading only the key blocks up to its last query; the pool's prefill through it
samples what the static sampler does."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tiny_hf

from graft_jax.models import load_hf
from graft_jax.models.chunk_attention import blocks_seen, chunk_attention, key_block

B, K, G, H, S, C = 3, 2, 2, 32, 96, 16


def _inputs(seed):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, C, K, G, H)).astype(np.float32)
  k = rng.normal(size=(B, K, H, S)).astype(np.float32)
  v = rng.normal(size=(B, K, S, H)).astype(np.float32)
  # Left pads of 0, 5 and 20 slots; the rest of the window real.
  mask = np.arange(S)[None] >= np.array([0, 5, 20])[:, None]
  return q, k, v, mask


def _reference(q, k, v, mask, start):
  """float64: query t at slot start + t over the real slots s <= start + t; 0 where
  it sees none."""
  out = np.zeros(q.shape)
  for b in range(B):
    for t in range(C):
      seen = mask[b] & (np.arange(S) <= start + t)
      if not seen.any():
        continue
      x = np.einsum("kgh,khs->kgs", q[b, t].astype(np.float64), k[b][:, :, seen]) * H ** -0.5
      p = np.exp(x - x.max(-1, keepdims=True))
      out[b, t] = np.einsum("kgs,ksh->kgh", p / p.sum(-1, keepdims=True), v[b][:, seen])
  return out


@pytest.mark.parametrize("start,block", [(0, 16), (16, 16), (40, 16), (80, 32), (8, 32)])
def test_equals_float64_and_reads_only_the_blocks_it_sees(start, block):
  q, k, v, mask = _inputs(start + block)
  read = int(blocks_seen(start, C, block))
  assert read == -(-(start + C) // block)
  # Every block past the last one read holds NaN: reading any of it would show.
  k_poisoned, v_poisoned = k.copy(), v.copy()
  k_poisoned[..., read * block:] = np.nan
  v_poisoned[:, :, read * block:] = np.nan
  got, count = jax.jit(chunk_attention, static_argnames="block")(
      *map(jnp.asarray, (q, k_poisoned, v_poisoned, mask)), jnp.int32(start), block=block)
  assert int(count) == min(read, S // block)
  np.testing.assert_allclose(np.asarray(got, np.float64), _reference(q, k, v, mask, start),
                             rtol=2e-5, atol=2e-5)


def test_key_block_is_a_power_of_two_dividing_the_window():
  assert key_block(4096 + 512, 512) == 512
  assert key_block(80, 512) == 16
  assert key_block(96, 64) == 32
  assert key_block(40, 512) == 0  # 8 slots: below the smallest block
  assert key_block(512, 512) == 0  # one block: nothing to skip


def test_a_window_of_partial_blocks_is_refused():
  q, k, v, mask = _inputs(0)
  with pytest.raises(ValueError, match="whole blocks"):
    chunk_attention(*map(jnp.asarray, (q, k, v, mask)), 0, block=64)


def test_the_pool_prefilling_through_it_samples_what_the_static_sampler_does(ckpt_root):
  """attention 'blocked': every prefill chunk of the pool walks key blocks of 16 slots
  of its 80-slot window (48 prompt + 32 response slots); the static sampler attends
  densely. The same tokens and log-probs."""
  from graft_jax.rollout import JaxSamplerEngine, SamplingParams
  from graft_jax.rollout.continuous import ContinuousSamplerEngine

  path = tiny_hf.checkpoint("qwen3", ckpt_root).path
  walked, dense = load_hf(path)[0], load_hf(path)[0]
  walked.set_memory_options(attention="blocked")
  dense.set_decode_attention("xla")
  eos = tuple(range(2, 40))
  prompts = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 43))]
  params = SamplingParams(max_new_tokens=24, temperature=1.0, seed=3)
  pool = ContinuousSamplerEngine(walked, eos_ids=eos, pad_id=0, slots=3, max_prompt_len=48,
                                 prefill_chunk=16).generate(prompts, 2, params)
  static = JaxSamplerEngine(dense, eos_ids=eos, pad_id=0).generate(prompts, 2, params)
  assert len(set(static.lengths_B.tolist())) > 2
  np.testing.assert_array_equal(pool.lengths_B, static.lengths_B)
  np.testing.assert_array_equal(pool.tokens_BxL, static.tokens_BxL)
  np.testing.assert_allclose(pool.logp_BxL, static.logp_BxL, atol=1e-5)
