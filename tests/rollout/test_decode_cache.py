"""The sampler's decode cache: allocated once at its final size (the one decode loop
carries prompt_len + max_new slots, nothing regrows), and finished rows attend to
one slot without changing what the live rows sample."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.rollout.sampler import attention_mask, generate_padded

CFG = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=32, intermediate_size=48,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32, qk_norm=True)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 30)), [7] * 9]


def _whiles(jaxpr):
  """Every while equation in `jaxpr` and the jaxprs nested in it."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "while":
      found.append(eqn)
    for value in eqn.params.values():
      for inner in value if isinstance(value, (tuple, list)) else (value,):
        inner = getattr(inner, "jaxpr", inner)
        if hasattr(inner, "eqns"):
          found += _whiles(inner)
  return found


def test_every_decode_loop_carries_the_final_cache():
  graphdef, state = nnx.split(init_model(CFG, rngs=nnx.Rngs(0)))
  p, l, n, max_new = 2, 16, 3, 64
  ids = np.ones((p, l), np.int32)
  jaxpr = jax.make_jaxpr(lambda s: generate_padded(
      graphdef, s, ids, np.ones_like(ids, bool), np.ones(p, bool), jax.random.key(0),
      np.int32(max_new), np.float32(1.0), np.float32(1.0), n=n, max_new=max_new,
      eos_ids=(1,), pad_id=0, greedy=True, top_k=0, use_top_p=False))(state).jaxpr
  decode_loops = 0
  for eqn in _whiles(jaxpr):  # the decode loop, and loops inside sampling
    caches = [a.shape for a in eqn.params["body_jaxpr"].in_avals
              if a.ndim == 4 and jnp.issubdtype(a.dtype, jnp.floating)]
    if not caches:
      continue
    decode_loops += 1
    # Keys (B, K, H, S) and values (B, K, S, H), each layer, all at S = L + max_new.
    assert caches == [(p * n, 2, 32, l + max_new), (p * n, 2, l + max_new, 32)] * 2, caches
  assert decode_loops == 1


def test_a_finished_row_attends_to_its_slot_alone():
  mask = np.array([[0, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], bool)
  got = np.asarray(attention_mask(jnp.asarray(mask), jnp.asarray([False, True]), 3))
  np.testing.assert_array_equal(got, [[0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 0, 0]])


def test_rows_finishing_leave_the_live_rows_as_they_were():
  """Greedy without EOS, then with EOS the token some rows reach early: each row is
  the same up to its first EOS and pad after it, whichever rows finished first."""
  model = init_model(CFG, rngs=nnx.Rngs(1))
  params = SamplingParams(max_new_tokens=40, temperature=0.0)
  free = JaxSamplerEngine(model, eos_ids=-1, pad_id=0).generate(PROMPTS, 1, params)
  # The token row 0 emits at step 3: rows that emit it stop there, others run on.
  eos = int(free.tokens_BxL[0, 3])
  ended = JaxSamplerEngine(model, eos_ids=eos, pad_id=0).generate(PROMPTS, 1, params)
  stops = [list(row).index(eos) + 1 if eos in row else 40 for row in free.tokens_BxL]
  assert min(stops) <= 4 and max(stops) > 4  # some rows finish while others decode
  for b, stop in enumerate(stops):
    np.testing.assert_array_equal(ended.tokens_BxL[b, :stop], free.tokens_BxL[b, :stop])
    np.testing.assert_array_equal(ended.tokens_BxL[b, stop:], 0)
    np.testing.assert_allclose(ended.logp_BxL[b, :stop], free.logp_BxL[b, :stop],
                               rtol=1e-6, atol=1e-6)
    assert ended.lengths_B[b] == stop
