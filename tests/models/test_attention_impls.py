"""The attention implementations: which one 'auto' runs per backend, and that each
gives the dense attention's values at every real position, with gradients.

cuDNN's kernel itself needs a GPU (launch/gpu_check.py compares it with 'dense'
there); here its wrapper (the span rotation, lengths and GQA grouping) runs with
``jax.nn.dot_product_attention``'s XLA implementation in the kernel's place. The
Pallas splash kernel runs in interpret mode.
"""

import functools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax.models import attention as attention_lib
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from tests.models.model_grads import nll_and_grads
from tests.models.test_blocked_attention import QWEN3, SMOLLM3, _batch, _model

_CUDNN_ON_XLA = functools.partial(attention_lib.cudnn_attention, implementation="xla")


@pytest.mark.parametrize("backend,dtype,head_dim,length,want", [
    ("gpu", jnp.bfloat16, 128, 6144, "cudnn"),
    ("gpu", jnp.float16, 64, 100, "cudnn"),
    ("gpu", jnp.float32, 128, 6144, "blocked"),   # cuDNN's flash kernel is half precision only
    ("gpu", jnp.bfloat16, 256, 6144, "blocked"),  # head_dim above cuDNN's 128
    ("tpu", jnp.bfloat16, 128, 6144, "splash"),
    ("cpu", jnp.float32, 64, 512, "dense"),
    ("cpu", jnp.float32, 64, 513, "blocked"),
])
def test_auto_resolves_per_backend(backend, dtype, head_dim, length, want):
  got = attention_lib.resolve_impl("auto", dtype=dtype, head_dim=head_dim, length=length,
                                   block=512, backend=backend)
  assert got == want
  line = attention_lib.describe_impl("auto", dtype=dtype, head_dim=head_dim, length=length,
                                     block=512, backend=backend)
  assert line.startswith(want)


def test_an_explicit_choice_is_kept_and_an_unknown_one_refused():
  for impl in ("dense", "blocked", "cudnn", "splash"):
    assert attention_lib.resolve_impl(impl, dtype=jnp.float32, head_dim=8, length=8,
                                      backend="gpu") == impl
  with pytest.raises(ValueError, match="fused"):
    attention_lib.resolve_impl("fused", dtype=jnp.float32, head_dim=8, length=8)


def test_auto_on_a_gpu_calls_the_cudnn_wrapper(monkeypatch):
  calls = []

  def recording(*args, **kwargs):
    calls.append(args[0].dtype)
    return _CUDNN_ON_XLA(*args, **kwargs)

  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  monkeypatch.setattr(attention_lib, "cudnn_attention", recording)
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(2, 16, 1, 2, 8)), jnp.bfloat16)
  k = v = jnp.asarray(rng.normal(size=(2, 16, 1, 8)), jnp.bfloat16)
  attention_lib.attention(q, k, v, jnp.ones((2, 16), bool), impl="auto")
  assert calls == [jnp.bfloat16]


def _shapes(jaxpr):
  """The shape of every value a jaxpr and its sub-jaxprs (loop bodies, custom VJPs) form."""
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      yield tuple(getattr(var.aval, "shape", ()))
  for sub in jax.extend.core.subjaxprs(jaxpr):
    yield from _shapes(sub)


def test_the_gpu_fallback_forms_no_t_by_t_scores():
  """'auto' on a GPU with fp32 inputs is 'blocked': forward and backward hold one
  block of scores, never T x T, at T above the block."""
  t, block = 256, 64
  rng = np.random.default_rng(1)
  q = jnp.asarray(rng.normal(size=(1, t, 2, 2, 8)), jnp.float32)
  k = v = jnp.asarray(rng.normal(size=(1, t, 2, 8)), jnp.float32)
  mask = jnp.ones((1, t), bool)
  impl = attention_lib.resolve_impl("auto", dtype=q.dtype, head_dim=8, length=t, block=block,
                                    backend="gpu")
  loss = lambda q, k, v: attention_lib.attention(q, k, v, mask, impl=impl, block=block).sum()
  jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v).jaxpr
  big = [s for s in _shapes(jaxpr) if list(s).count(t) >= 2]
  assert not big, big
  dense = jax.make_jaxpr(jax.grad(lambda q, k, v: attention_lib.attention(
      q, k, v, mask, impl="dense").sum(), argnums=(0, 1, 2)))(q, k, v).jaxpr
  assert any(list(s).count(t) >= 2 for s in _shapes(dense))  # the check can fail


@pytest.mark.parametrize("impl", ["cudnn", "splash"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_logits_equal_dense_at_real_positions(impl, side, monkeypatch):
  monkeypatch.setattr(attention_lib, "cudnn_attention", _CUDNN_ON_XLA)
  for cfg in (SMOLLM3, QWEN3):
    ids, mask = _batch(side)  # rows of 37, 30, 9 and 1 real tokens
    want = np.asarray(_model(cfg, "dense")(ids, mask))
    got = np.asarray(_model(cfg, impl)(ids, mask))
    real = np.asarray(mask)
    np.testing.assert_allclose(got[real], want[real], rtol=1e-5, atol=1e-5)
    assert np.isfinite(got).all()  # pad queries too: no NaN to leak into a gradient


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["cudnn", "splash"])
def test_gradients_equal_dense_with_an_all_pad_row(impl, monkeypatch):
  monkeypatch.setattr(attention_lib, "cudnn_attention", _CUDNN_ON_XLA)
  ids, mask = _batch("left")
  mask = mask.at[3].set(False)  # a filler row of a micro-batch: no real token
  loss_and_grads = lambda impl: nll_and_grads(
      _model(SMOLLM3, impl, remat="full", scan_layers=True), ids, mask)
  want_loss, want = loss_and_grads("dense")
  got_loss, got = loss_and_grads(impl)
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
  for k, w in want.items():
    assert np.isfinite(got[k]).all(), k
    np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=k)


def test_sampling_with_the_cudnn_wrapper_equals_dense(monkeypatch):
  """The sampler's prefill rows are left-padded: the wrapper rotates them."""
  monkeypatch.setattr(attention_lib, "cudnn_attention", _CUDNN_ON_XLA)
  prompts = [[5, 6, 7, 8, 9], [10, 11]]
  params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=4)
  runs = [JaxSamplerEngine(_model(QWEN3, impl), eos_ids=2, pad_id=0).generate(prompts, 2, params)
          for impl in ("dense", "cudnn")]
  for b in range(4):
    assert runs[1].response_ids(b) == runs[0].response_ids(b)
  np.testing.assert_allclose(runs[1].logp_BxL, runs[0].logp_BxL, atol=1e-5)
