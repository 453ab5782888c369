"""token_logprobs: teacher-forced log-probs against transformers, padding, and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import torch
import tiny_hf
from flax import nnx

from graft_jax.models import load_hf, pack_pairs, token_logprobs, token_logprobs_jit


def _hf_logprobs(hf_model, ids, temperature):
  with torch.no_grad():
    logits = hf_model(torch.tensor([ids]).long()).logits[0].double() / temperature
    logp = torch.log_softmax(logits, -1)[:-1].gather(-1, torch.tensor(ids[1:])[:, None])
  return logp[:, 0].numpy()


def test_packed_pairs_match_transformers(ckpt):
  model, _ = load_hf(ckpt.path)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(3, 160, n).tolist() for n in (5, 30, 12)]
  responses = [rng.integers(3, 160, n).tolist() for n in (60, 3, 41)]
  packed = pack_pairs(prompts, responses, pad_id=0)
  assert packed.ids_BxT.shape == (3, 128)
  for temperature in (1.0, 0.7):
    logp = token_logprobs_jit(model, packed.ids_BxT, packed.attn_mask_BxT,
                              temperature=temperature)
    got = packed.responses(logp)
    for b, (p, r) in enumerate(zip(prompts, responses)):
      want = _hf_logprobs(ckpt.hf_model, p + r, temperature)[len(p) - 1:]
      np.testing.assert_allclose(got[b], want, atol=1e-4)
    assert np.all(np.asarray(logp)[~packed.attn_mask_BxT] == 0)


def test_differentiable_inside_jit(ckpt_root):
  ckpt = tiny_hf.checkpoint("llama", ckpt_root)
  model, _ = load_hf(ckpt.path)
  graphdef, state = nnx.split(model)
  packed = pack_pairs([[5, 6, 7]], [[8, 9, 10, 11]], pad_id=0, multiple=8)

  @jax.jit
  def loss(state):
    logp = token_logprobs(nnx.merge(graphdef, state), packed.ids_BxT, packed.attn_mask_BxT)
    return -(logp * packed.response_mask_BxT).sum()

  value, grads = jax.value_and_grad(loss)(state)
  assert np.isfinite(value) and value > 0
  norms = [float(jnp.abs(g).max()) for g in jax.tree.leaves(grads)]
  assert all(np.isfinite(norms)) and min(norms) > 0


def test_pack_pairs_layout():
  packed = pack_pairs([[1, 2], [3]], [[4], [5, 6, 7]], pad_id=9, multiple=4)
  np.testing.assert_array_equal(packed.ids_BxT, [[1, 2, 4, 9], [3, 5, 6, 7]])
  np.testing.assert_array_equal(packed.response_mask_BxT,
                                [[0, 0, 1, 0], [0, 1, 1, 1]])
  assert [r.tolist() for r in packed.responses(packed.ids_BxT)] == [[4], [5, 6, 7]]
