"""The CPU decode-attention kernel (graft_jax.backends.cpu.decode_kernel) against float64 NumPy,
and the decoder routing its decode steps through it ('auto' / 'kernel') or not ('xla')."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_jax.backends.cpu import decode_kernel
from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import JaxSamplerEngine, SamplingParams

HOST = decode_kernel.host_reason()
needs_kernel = pytest.mark.skipif(HOST is not None, reason=f"the CPU kernel cannot run: {HOST}")
# Every build of the kernel this host can run (AVX-512 hosts run the AVX2 build too).
EACH_ISA = pytest.mark.parametrize("isa", [
    pytest.param(isa, marks=pytest.mark.skipif(
        HOST is not None or isa not in decode_kernel.host_isas(),
        reason=f"this host cannot run the {isa} kernel: {HOST or decode_kernel.host_isas()}"))
    for isa in decode_kernel.ISAS])


def reference(q, k, v, mask):
  """softmax(q k / sqrt(H), masked with -1e30) v in float64."""
  s = np.einsum("bkgh,bkhs->bkgs", q.astype(np.float64), k.astype(np.float64))
  s = np.where(mask[:, None, None], s * q.shape[-1] ** -0.5, -1e30)
  p = np.exp(s - s.max(-1, keepdims=True))
  return np.einsum("bkgs,bksh->bkgh", p / p.sum(-1, keepdims=True), v.astype(np.float64))


def written(kc, vc, kn, vn, slot):
  """The caches with the step's key and value at `slot`, clamped into the cache
  (NumPy's indexing, as XLA's dynamic_update_slice places them)."""
  kc, vc = kc.copy(), vc.copy()
  slot = min(max(slot, 0), kc.shape[-1] - 1)
  kc[:, :, :, slot] = kn
  vc[:, :, slot, :] = vn
  return kc, vc


def operands(seed, b, k, g, h, s):
  """Random q / cache / the step's key and value in the sampler's layouts, a slot;
  left-padded masks with one row that sees nothing and one that sees a single slot."""
  rng = np.random.default_rng(seed)
  q = rng.standard_normal((b, k, g, h)).astype(np.float32)
  kc = rng.standard_normal((b, k, h, s)).astype(np.float32)
  vc = rng.standard_normal((b, k, s, h)).astype(np.float32)
  kn = rng.standard_normal((b, k, h)).astype(np.float32)
  vn = rng.standard_normal((b, k, h)).astype(np.float32)
  slot = int(rng.integers(0, s))
  mask = np.zeros((b, s), bool)
  for row in range(b):
    mask[row, rng.integers(0, s):] = True
  mask[0] = False
  if b > 1:
    mask[1] = False
    mask[1, s - 1] = True
  return q, kc, vc, kn, vn, slot, mask


def run_kernel(q, kc, vc, kn, vn, slot, mask, isa=None):
  """(out, key cache, value cache) from the kernel built for `isa` (None: the host's best)."""
  fn = jax.jit(lambda *a: decode_kernel.decode_attention(*a, scale=q.shape[-1] ** -0.5,
                                                         isa=isa))
  return tuple(map(np.asarray, fn(q, kc, vc, kn, vn, np.int32(slot), mask)))


def check(q, kc, vc, kn, vn, slot, mask, isa=None):
  """The kernel's caches equal NumPy's write exactly; its output matches float64
  attention over them."""
  out, k_out, v_out = run_kernel(q, kc, vc, kn, vn, slot, mask, isa)
  k_ref, v_ref = written(kc, vc, kn, vn, slot)
  np.testing.assert_array_equal(k_out, k_ref)
  np.testing.assert_array_equal(v_out, v_ref)
  np.testing.assert_allclose(out, reference(q, k_ref, v_ref, mask), rtol=1e-5, atol=1e-5)


def test_builds_where_the_host_can():
  if HOST is not None:
    pytest.skip(f"the CPU kernel cannot run: {HOST}")
  assert decode_kernel.unavailable_reason() is None
  assert decode_kernel.best_isa() == decode_kernel.host_isas()[0]
  for isa in decode_kernel.host_isas():
    assert decode_kernel.unavailable_reason(isa) is None, isa


def test_an_isa_the_host_lacks_says_why():
  lacking = [isa for isa in decode_kernel.ISAS if isa not in decode_kernel.host_isas()]
  if HOST is not None or not lacking:
    pytest.skip(f"this host runs every build, or none: {HOST or decode_kernel.host_isas()}")
  reason = decode_kernel.unavailable_reason(lacking[0])
  assert reason.startswith(f"cannot use {lacking[0]}"), reason
  with pytest.raises(RuntimeError, match=f"cannot use {lacking[0]}"):
    decode_kernel.decode_attention(*operands(0, 1, 1, 1, 32, 4), scale=1.0, isa=lacking[0])


@EACH_ISA
@pytest.mark.parametrize("b,k,g,h,s", [
    (5, 2, 2, 64, 37),   # the benchmark model's heads; S not a multiple of 16
    (3, 1, 1, 32, 16),
    (4, 2, 3, 128, 50),  # an odd group at H = 128 (value pass 2 + 1 queries)
    (2, 2, 8, 256, 20),  # H = 256: one query per value pass
    (6, 4, 5, 64, 144),  # 4 + 1 queries per score pass
    (7, 3, 7, 32, 33),
    (2, 1, 6, 128, 300),
])
def test_matches_float64(b, k, g, h, s, isa):
  check(*operands(0, b, k, g, h, s), isa=isa)


@EACH_ISA
@pytest.mark.parametrize("slot", [-3, 0, 36, 37, 90])
def test_slot_is_clamped_into_the_cache(slot, isa):
  """Slots outside [0, S) land at the nearest end, as dynamic_update_slice's do."""
  q, kc, vc, kn, vn, _, mask = operands(1, 3, 2, 2, 64, 37)
  check(q, kc, vc, kn, vn, slot, mask, isa)


@EACH_ISA
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.integers(1, 6), st.integers(1, 3), st.integers(1, 9),
       st.sampled_from(decode_kernel.HEAD_DIMS), st.integers(1, 70))
def test_any_shape_matches_float64(isa, seed, b, k, g, h, s):
  check(*operands(seed, b, k, g, h, s), isa=isa)


@EACH_ISA
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.integers(1, 5), st.integers(1, 2), st.integers(1, 5),
       st.sampled_from(decode_kernel.HEAD_DIMS), st.integers(1, 90))
def test_slots_outside_each_rows_live_span_are_not_read(isa, seed, b, k, g, h, s):
  """Each row sees slots [a, c) (the sampler's rows: left padding, then the slots
  filled so far). Keys and values before a (rounded down to 16, the widest vector)
  and from c on are NaN: the kernel does not read them, so its output is finite
  and matches float64 attention over the live slots; the write still lands."""
  q, kc, vc, kn, vn, _, _ = operands(seed, b, k, g, h, s)
  rng = np.random.default_rng(seed + 1)
  mask = np.zeros((b, s), bool)
  clean_k, clean_v = kc.copy(), vc.copy()
  for row in range(b):
    a = int(rng.integers(0, s))
    c = int(rng.integers(a + 1, s + 1))
    mask[row, a:c] = True
    dead = np.ones(s, bool)
    dead[a // 16 * 16:c] = False
    kc[row][..., dead] = np.nan
    vc[row][:, dead] = np.nan
  slot = int(rng.integers(0, s))
  out, k_out, v_out = run_kernel(q, kc, vc, kn, vn, slot, mask, isa)
  np.testing.assert_array_equal(k_out, written(kc, vc, kn, vn, slot)[0])
  np.testing.assert_array_equal(v_out, written(kc, vc, kn, vn, slot)[1])
  k_ref, v_ref = written(clean_k, clean_v, kn, vn, slot)
  np.testing.assert_allclose(out, reference(q, k_ref, v_ref, mask), rtol=1e-5, atol=1e-5)


def test_applies_says_why_not():
  f32 = jnp.zeros((2, 1, 2, 32), jnp.float32)
  assert "float32" in decode_kernel.applies(f32.astype(jnp.bfloat16), f32, f32)
  assert "head_dim" in decode_kernel.applies(jnp.zeros((2, 1, 2, 48)), f32, f32)


CFG = ModelConfig(model_type="qwen3", vocab_size=97, hidden_size=64, intermediate_size=96,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32, qk_norm=True)


def decode_step(model, ids_BxT, *, run=True):
  """Prefill `ids_BxT` (row 0 left-padded by 3) into a 16-slot cache, then one decode
  step: (its fp32 logits, the cache after it, the decode step's StableHLO text).
  Without `run`, only lowers the step (over an empty cache) and gives (None, None,
  its text)."""
  b, t = ids_BxT.shape
  mask_BxS = np.zeros((b, 16), bool)
  mask_BxS[:, :t] = True
  mask_BxS[0, :3] = False
  pos_BxT = np.maximum(np.cumsum(mask_BxS[:, :t], axis=1) - 1, 0)
  cache = model.init_cache(b, 16)
  if run:
    _, cache = model.forward_cached(ids_BxT, pos_BxT, mask_BxS, cache, 0, last_only=True)
  mask_BxS[:, t] = True
  step = jax.jit(lambda m, ids, pos, msk, c, i: m.forward_cached(ids, pos, msk, c, i))
  args = (model, ids_BxT[:, -1:], pos_BxT[:, -1:] + 1, mask_BxS, cache, jnp.int32(t))
  text = step.lower(*args).as_text()
  if not run:
    return None, None, text
  logits, cache = step(*args)
  return np.asarray(logits), jax.tree.map(np.asarray, cache), text


@needs_kernel
def test_decoder_decode_step_takes_the_kernel_unless_told_xla():
  ids = np.random.default_rng(1).integers(3, 97, (3, 9)).astype(np.int32)
  model = init_model(CFG, rngs=nnx.Rngs(2))
  got, caches = {}, {}
  for impl in ("auto", "kernel", "xla"):
    model.set_decode_attention(impl)
    logits, caches[impl], hlo = decode_step(model, ids)
    assert (decode_kernel.TARGET in hlo) == (impl != "xla"), impl
    got[impl] = logits
  np.testing.assert_allclose(got["kernel"], got["xla"], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(got["auto"], got["kernel"])
  # The kernel writes the step's key and value where dynamic_update_slice does (the
  # values written agree to rounding: XLA fuses RoPE into each path's own program;
  # the kernel's write itself is exact, `check`).
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
               caches["kernel"], caches["xla"])


def test_bf16_auto_keeps_xla_and_kernel_says_why():
  ids = np.random.default_rng(1).integers(3, 97, (2, 5)).astype(np.int32)
  model = init_model(CFG, rngs=nnx.Rngs(2), dtype=jnp.bfloat16)
  _, _, hlo = decode_step(model, ids, run=False)
  assert decode_kernel.TARGET not in hlo
  model.set_decode_attention("kernel")
  with pytest.raises(ValueError, match="decode_attention='kernel'.*float32"):
    decode_step(model, ids, run=False)
  with pytest.raises(ValueError, match="decode attention must be one of"):
    model.set_decode_attention("fast")


def assert_samples_as_xla(impl):
  """The JAX sampler with decode attention ``impl`` draws XLA's tokens (log-probs to
  rounding) on a random model."""
  prompts = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 30))]
  out = {}
  for name in (impl, "xla"):
    model = init_model(CFG, rngs=nnx.Rngs(3))
    model.set_decode_attention(name)
    engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=0)
    out[name] = engine.generate(prompts, 2, SamplingParams(max_new_tokens=20, temperature=1.0,
                                                           seed=4))
  np.testing.assert_array_equal(out[impl].tokens_BxL, out["xla"].tokens_BxL)
  np.testing.assert_allclose(out[impl].logp_BxL, out["xla"].logp_BxL, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_sampler_with_the_kernel_samples_what_xla_does():
  assert_samples_as_xla("kernel")
