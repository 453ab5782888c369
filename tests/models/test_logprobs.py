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


def _chunked_logp_fn(graphdef, packed, chunk):
  return jax.jit(lambda state: token_logprobs(nnx.merge(graphdef, state), packed.ids_BxT,
                                              packed.attn_mask_BxT, chunk=chunk))


def _weighted_loss_fn(graphdef, packed, chunk):
  weights = np.linspace(-1.0, 1.0, packed.ids_BxT.size).reshape(packed.ids_BxT.shape)
  def loss(state):
    logp = token_logprobs(nnx.merge(graphdef, state), packed.ids_BxT, packed.attn_mask_BxT,
                          chunk=chunk)
    return (weights * logp * packed.response_mask_BxT).sum()
  return loss


def _packed_example():
  rng = np.random.default_rng(1)
  prompts = [rng.integers(3, 160, n).tolist() for n in (5, 30, 12)]
  responses = [rng.integers(3, 160, n).tolist() for n in (60, 3, 41)]
  return prompts, responses, pack_pairs(prompts, responses, pad_id=0)


def test_chunked_logits_equal_transformers_and_the_full_logits(ckpt):
  """127 scored positions in blocks of 16: 8 blocks, the last one padded."""
  model, _ = load_hf(ckpt.path)
  graphdef, state = nnx.split(model)
  prompts, responses, packed = _packed_example()
  chunked = np.asarray(_chunked_logp_fn(graphdef, packed, 16)(state))
  full = np.asarray(_chunked_logp_fn(graphdef, packed, None)(state))
  np.testing.assert_allclose(chunked, full, atol=1e-6, rtol=0)
  for b, (p, r) in enumerate(zip(prompts, responses)):
    want = _hf_logprobs(ckpt.hf_model, p + r, 1.0)[len(p) - 1:]
    np.testing.assert_allclose(packed.responses(chunked)[b], want, atol=1e-4)
  assert np.all(chunked[~packed.attn_mask_BxT] == 0)


def test_chunked_gradients_equal_the_full_gradients(ckpt_root):
  ckpt = tiny_hf.checkpoint("smollm3", ckpt_root)  # tied embeddings: head and input share
  model, _ = load_hf(ckpt.path)
  graphdef, state = nnx.split(model)
  _, _, packed = _packed_example()
  g_chunked = jax.jit(jax.grad(_weighted_loss_fn(graphdef, packed, 16)))(state)
  g_full = jax.jit(jax.grad(_weighted_loss_fn(graphdef, packed, None)))(state)
  for x, y in zip(jax.tree.leaves(g_chunked), jax.tree.leaves(g_full)):
    scale = float(np.abs(np.asarray(y)).max())
    assert scale > 0
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5 * scale, rtol=0)


def _largest_logits_block(jaxpr, vocab: int, rows: int) -> int:
  """The most positions (elements / (rows x V)) of any ... x V array in a jaxpr and its
  sub-jaxprs; stacked per-block residuals count in full."""
  most = 0
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      shape = getattr(var.aval, "shape", ())
      if len(shape) >= 3 and shape[-1] == vocab:
        most = max(most, int(np.prod(shape)) // (vocab * rows))
    for param in eqn.params.values():
      for sub in param if isinstance(param, (tuple, list)) else (param,):
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          most = max(most, _largest_logits_block(inner, vocab, rows))
  return most


def test_chunked_loss_and_gradient_never_form_the_full_logits(ckpt_root):
  """Forward and backward hold at most B x chunk x V logits (the full path holds B x 128 x V)."""
  ckpt = tiny_hf.checkpoint("qwen3", ckpt_root)
  model, _ = load_hf(ckpt.path)
  graphdef, state = nnx.split(model)
  _, _, packed = _packed_example()
  vocab = model.cfg.vocab_size
  blocks = {}
  for chunk in (16, None):
    grad_fn = jax.value_and_grad(_weighted_loss_fn(graphdef, packed, chunk))
    blocks[chunk] = _largest_logits_block(jax.make_jaxpr(grad_fn)(state).jaxpr, vocab,
                                          rows=packed.ids_BxT.shape[0])
  assert blocks == {16: 16, None: 128}


def test_bucket_lengths_are_few_hold_the_rows_and_waste_under_a_third():
  from graft_jax.models.logprobs import bucket_length
  for cap in (40, 80, 200, 6144):
    sizes = [bucket_length(n, cap) for n in range(1, cap + 1)]
    assert all(s >= n and s % 16 == 0 for n, s in zip(range(1, cap + 1), sizes))
    assert sizes == sorted(sizes)  # a longer row never gets a shorter bucket
    low = -(-min(cap, 128) // 16) * 16
    assert min(sizes) >= low and max(sizes) == -(-cap // 16) * 16
    # A bucket wastes under a third of the row (plus rounding), or of the floor.
    assert all(s <= 4 / 3 * max(low, n) + 16 for n, s in zip(range(1, cap + 1), sizes))
    assert len(set(sizes)) <= 15  # cap * (3/4)^k down to the floor
  assert {bucket_length(n, 80) for n in range(1, 81)} == {80}  # small runs: one shape
  # Rows longer than the budget (re-tokenized peer text) take power-of-two sizes.
  assert [bucket_length(n, 80) for n in (81, 128, 129)] == [128, 128, 256]
  assert [bucket_length(n) for n in (1, 16, 17, 33)] == [16, 16, 32, 64]
