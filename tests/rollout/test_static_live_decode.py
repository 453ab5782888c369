"""The static sampler (`JaxSamplerEngine`) on the live-span decode kernel (Pallas's interpret
mode on a CPU): its decode steps give the logits of XLA's attention, the reference, for
left-padded prompts of mixed length and a finished row; on a CPU 'auto' stays off it."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax import backends
from graft_jax.models import init_model
from graft_jax.rollout import JaxSamplerEngine, sampler
from tests.models.test_decode_kernel import CFG

PROMPT_SLOTS, NEW_SLOTS, STEPS = 32, 16, 3  # blocks of 16 slots (`Attention._live_block`)


@functools.partial(jax.jit, static_argnums=0)
def _decode_logits(graphdef, state, ids_BxL, mask_BxL, done_B):
  """`generate_padded`'s prefill and decode cache, then STEPS of `sampler.decode`'s step
  (greedy tokens): each step's logits, STEPS x B x V."""
  model = nnx.merge(graphdef, state)
  logits_BxV, cache, kv_mask_BxS, positions_B = sampler.prefill(model, ids_BxL, mask_BxL)
  cache, kv_mask_BxS = sampler.decode_cache(cache, kv_mask_BxS, PROMPT_SLOTS + NEW_SLOTS)
  out = []
  for step in range(STEPS):
    slot = jnp.int32(PROMPT_SLOTS + step)  # traced, as in the decode loop
    token_B = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
    kv_mask_BxS = jax.lax.dynamic_update_slice(kv_mask_BxS, ~done_B[:, None], (0, slot))
    logits_Bx1xV, cache = model.forward_cached(
        token_B[:, None], (positions_B + step)[:, None],
        sampler.attention_mask(kv_mask_BxS, done_B, slot), cache, slot)
    logits_BxV = logits_Bx1xV[:, 0].astype(jnp.float32)
    out.append(logits_BxV)
  return jnp.stack(out)


def _left_padded(prompts):
  ids = np.zeros((len(prompts), PROMPT_SLOTS), np.int32)
  mask = np.zeros((len(prompts), PROMPT_SLOTS), bool)
  for i, p in enumerate(prompts):
    ids[i, PROMPT_SLOTS - len(p):], mask[i, PROMPT_SLOTS - len(p):] = p, True
  return ids, mask


def test_static_decode_steps_give_xlas_logits_through_the_live_kernel():
  # Mixed lengths, every span starting past the first block (slots 0..15), and a row
  # that is done from the start (a filler row).
  prompts = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 19)), [20, 21, 22]]
  ids, mask = _left_padded(prompts)
  done = np.array([False, False, False, True])
  model = init_model(CFG, rngs=nnx.Rngs(3))
  logits = {}
  for impl in ("live", "xla"):
    engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=0, decode_attention=impl)
    assert engine.decode_attention == impl
    assert nnx.merge(engine.graphdef, engine.state).decode_attention == impl
    args = (engine.graphdef, engine.decoding_state(), ids, mask, done)
    traced = str(jax.make_jaxpr(_decode_logits, static_argnums=0)(*args))
    assert ("pallas_call" in traced) == (impl == "live")
    logits[impl] = np.asarray(_decode_logits(*args))
  assert model.decode_attention == "auto"  # the caller's model is left as it is
  live = logits["live"][:, ~done]
  assert np.isfinite(live).all()
  np.testing.assert_allclose(live, logits["xla"][:, ~done], rtol=1e-5, atol=1e-5)


def test_auto_is_the_live_kernel_on_a_gpu_only():
  """On a CPU (also when tracing for a GPU) 'auto' keeps the model's own decode attention:
  the XLA path, or the CPU kernel where it applies, is unchanged."""
  model = init_model(CFG, rngs=nnx.Rngs(3))
  assert not backends.live_decode_by_default()
  with backends.traced_for("gpu"):
    assert not backends.live_decode_by_default()
  engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=0)
  assert engine.decode_attention == "auto"
  assert nnx.merge(engine.graphdef, engine.state).decode_attention == "auto"
