"""The decoder's decode step on the live-span kernel ('live'; Pallas's interpret mode on a
CPU): XLA's attention over the same cache, without reading the blocks past each row's span,
and the sampler's and the slot pool's tokens unchanged."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graft_jax.models import init_model
from graft_jax.rollout import ContinuousSamplerEngine, JaxSamplerEngine, SamplingParams
from tests.models.test_decode_kernel import CFG, assert_samples_as_xla

S = 48  # three blocks of 16 slots


def _prefilled(model, ids_BxT):
  """`ids_BxT` (row 0 left-padded by 3) prefilled into an S-slot cache: (cache, mask of
  the next decode step, positions)."""
  b, t = ids_BxT.shape
  mask_BxS = np.zeros((b, S), bool)
  mask_BxS[:, :t] = True
  mask_BxS[0, :3] = False
  pos_BxT = np.maximum(np.cumsum(mask_BxS[:, :t], axis=1) - 1, 0)
  _, cache = model.forward_cached(ids_BxT, pos_BxT, mask_BxS, model.init_cache(b, S), 0,
                                  last_only=True)
  mask_BxS[:, t] = True
  return cache, mask_BxS, pos_BxT


def _step(model, ids_BxT, cache, mask_BxS, pos_BxT):
  t = ids_BxT.shape[1]
  step = jax.jit(lambda m, ids, pos, msk, c, i: m.forward_cached(ids, pos, msk, c, i)[0])
  return np.asarray(step(model, ids_BxT[:, -1:], pos_BxT[:, -1:] + 1, mask_BxS, cache,
                         jnp.int32(t)))


def test_live_decode_step_is_xlas_and_never_reads_past_the_span():
  ids = np.random.default_rng(1).integers(3, 97, (3, 9)).astype(np.int32)
  model = init_model(CFG, rngs=nnx.Rngs(2))
  cache, mask, pos = _prefilled(model, ids)
  model.set_decode_attention("xla")
  want = _step(model, ids, cache, mask, pos)
  # NaN in every slot of the blocks past the spans (slots 16..47): XLA reads them
  # (its products over the whole window turn NaN), the live kernel does not.
  poison = lambda c: c.at[..., 16:].set(jnp.nan) if c.shape[-1] == S else c.at[..., 16:, :].set(
      jnp.nan)
  poisoned = jax.tree.map(poison, cache)
  assert np.isnan(_step(model, ids, poisoned, mask, pos)).all()
  model.set_decode_attention("live")
  np.testing.assert_allclose(_step(model, ids, cache, mask, pos), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(_step(model, ids, poisoned, mask, pos), want, rtol=1e-5, atol=1e-5)


def test_live_needs_a_window_of_whole_blocks():
  ids = np.random.default_rng(1).integers(3, 97, (2, 5)).astype(np.int32)
  model = init_model(CFG, rngs=nnx.Rngs(2))
  model.set_decode_attention("live")
  mask = np.ones((2, 24), bool)
  with pytest.raises(ValueError, match="decode_attention='live'.*multiple of 16.*24"):
    model.forward_cached(ids[:, :1], np.zeros((2, 1), np.int32), mask, model.init_cache(2, 24),
                         jnp.int32(5))


def test_sampler_on_the_live_kernel_samples_what_xla_does():
  assert_samples_as_xla("live")


def test_slot_pool_on_the_live_kernel_samples_what_the_static_sampler_does():
  """Slots refilled mid-call (several EOS ids end rows early): each row's span is its
  left-padded prompt and its response so far, whatever the slot held before."""
  prompts, eos = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 30))], tuple(range(2, 40))
  model = init_model(CFG, rngs=nnx.Rngs(3))
  params = SamplingParams(max_new_tokens=20, temperature=1.0, seed=4)
  pool = ContinuousSamplerEngine(model, eos_ids=eos, pad_id=0, slots=2, max_prompt_len=32,
                                 decode_attention="live").generate(prompts, 2, params)
  model.set_decode_attention("xla")
  static = JaxSamplerEngine(model, eos_ids=eos, pad_id=0).generate(prompts, 2, params)
  assert len(set(static.lengths_B.tolist())) > 2
  np.testing.assert_array_equal(pool.tokens_BxL, static.tokens_BxL)
  np.testing.assert_allclose(pool.logp_BxL, static.logp_BxL, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="decode_attention must be auto, xla or live"):
    ContinuousSamplerEngine(model, eos_ids=eos, pad_id=0, decode_attention="kernel")
