"""Warm-start pieces: response-only loss, EOS appended, NumPy init, a step that learns."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graft_jax.models import token_logprobs_jit
from graft_jax.toy import tiny_config
from graft_jax.toy.tokenizer import train_tokenizer
from graft_jax.toy.warm_start import (SFTConfig, init_host, sft_loss, tokenize_pairs,
                                      train_sft)

PROMPTS = ["Compute 4+5. Answer:", "Compute 12*3. Answer:"]
RESPONSES = [" 4+5=9. \\boxed{9}", " 12*3=36. \\boxed{36}"]


@pytest.fixture(scope="module")
def tok():
  return train_tokenizer([p + r for p, r in zip(PROMPTS, RESPONSES)] * 4, "smollm3", 64)


@pytest.fixture(scope="module")
def model_cfg(tok):
  spec = tiny_config().model_b
  return spec.model_config(len(tok), tok.eos_token_id, tok.pad_token_id, 64)


def test_pairs_mask_the_prompt_and_end_in_eos(tok):
  data = tokenize_pairs(tok, PROMPTS, RESPONSES, max_len=64)
  assert data.ids_NxT.shape[1] % 8 == 0
  for row, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
    n_p = len(tok.encode(p, add_special_tokens=False))
    n_r = len(tok.encode(r, add_special_tokens=False)) + 1
    assert not data.loss_mask_NxT[row, :n_p].any()
    assert data.loss_mask_NxT[row, n_p:n_p + n_r].all()
    assert data.loss_mask_NxT[row].sum() == n_r
    assert data.ids_NxT[row, n_p + n_r - 1] == tok.eos_token_id
  with pytest.raises(ValueError, match="max_len"):
    tokenize_pairs(tok, PROMPTS, RESPONSES, max_len=8)


def test_loss_is_mean_response_nll(tok, model_cfg):
  model = init_host(model_cfg, seed=0)
  data = tokenize_pairs(tok, PROMPTS, RESPONSES, max_len=64)
  logp = np.asarray(token_logprobs_jit(model, data.ids_NxT, data.attn_mask_NxT))
  want = -logp[data.loss_mask_NxT].mean()
  graphdef, state = nnx.split(model)
  loss = jax.jit(lambda s, *arrays: sft_loss(nnx.merge(graphdef, s), *arrays))
  got = float(loss(state, data.ids_NxT, data.attn_mask_NxT, data.loss_mask_NxT))
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_host_init_matches_init_model_distribution(model_cfg):
  model = init_host(model_cfg, seed=0)
  again = init_host(model_cfg, seed=0)
  for (path, var), (_, var2) in zip(nnx.to_flat_state(nnx.state(model, nnx.Param)),
                                    nnx.to_flat_state(nnx.state(again, nnx.Param))):
    value = np.asarray(var.get_value())
    np.testing.assert_array_equal(value, np.asarray(var2.get_value()))
    if path[-1] == "scale_D":
      assert (value == 1).all(), path
    else:
      assert 0.01 < value.std() < 0.03, path


@pytest.mark.slow  # compiles a train step
def test_a_few_steps_lower_the_loss(tok, model_cfg):
  data = tokenize_pairs(tok, PROMPTS, RESPONSES, max_len=64)
  _, losses = train_sft(init_host(model_cfg, seed=0), data,
                        SFTConfig(steps=30, batch_size=2, lr=1e-2, warmup_steps=1), seed=0)
  assert losses[-1] < 0.5 * losses[0]
