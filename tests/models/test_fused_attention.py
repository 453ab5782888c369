"""'fused' attention (jax.nn.dot_product_attention, XLA on CPU) gives the dense attention's
logits and gradients at every real position of right-padded rows, and the sampler's
left-padded prefill falls back to the blocked path."""

import numpy as np
import pytest

from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from tests.models.model_grads import nll_and_grads
from tests.models.test_blocked_attention import QWEN3, SMOLLM3, _batch, _model


@pytest.mark.parametrize("cfg", [SMOLLM3, QWEN3], ids=["smollm3", "qwen3"])
def test_fused_logits_equal_dense_at_real_positions(cfg):
  ids, mask = _batch("right")  # rows of 37, 30, 9 and 1 real tokens
  want = np.asarray(_model(cfg, "dense")(ids, mask))
  got = np.asarray(_model(cfg, "fused")(ids, mask))
  real = np.asarray(mask)
  np.testing.assert_allclose(got[real], want[real], rtol=1e-5, atol=1e-5)
  assert np.isfinite(got).all()  # pad queries too: no NaN to leak into a gradient


def test_fused_gradients_equal_dense_with_an_all_pad_row():
  ids, mask = _batch("right")
  mask = mask.at[3].set(False)  # a filler row of a micro-batch: no real token

  loss_and_grads = lambda impl: nll_and_grads(
      _model(SMOLLM3, impl, remat="full", scan_layers=True), ids, mask)
  want_loss, want = loss_and_grads("dense")
  got_loss, got = loss_and_grads("fused")
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
  for k, w in want.items():
    assert np.isfinite(got[k]).all(), k
    np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=k)


def test_sampling_with_fused_attention_equals_dense():
  prompts = [[5, 6, 7, 8, 9], [10, 11]]  # left-padded in the prefill
  params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=4)
  runs = [JaxSamplerEngine(_model(QWEN3, impl), eos_ids=2, pad_id=0).generate(prompts, 2, params)
          for impl in ("dense", "fused")]
  for b in range(4):
    assert runs[1].response_ids(b) == runs[0].response_ids(b)
  np.testing.assert_allclose(runs[1].logp_BxL, runs[0].logp_BxL, atol=1e-5)
