"""Packed rows: several sequences per row, told apart by segment ids, attend and
score as if each were alone (float64 NumPy and transformers as references)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tiny_hf

from graft_jax.models import load_hf, token_logprobs
from graft_jax.models.attention import attention, pallas_segment_attention, splash_attention
from graft_jax.models.decoder import positions_from_segments


def _reference_attention(q_TxKxGxH, k_TxKxH, v_TxKxH):
  """Causal attention of one unpadded sequence in float64."""
  q, k, v = (np.asarray(x, np.float64) for x in (q_TxKxGxH, k_TxKxH, v_TxKxH))
  t, h = q.shape[0], q.shape[-1]
  scores = np.einsum("tkgh,skh->kgts", q, k) / np.sqrt(h)
  scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  return np.einsum("kgts,skh->tkgh", probs, v)


def _packed_case(lengths_per_row, t, seed=0, kv=2, g=2, h=16):
  rng = np.random.default_rng(seed)
  b = len(lengths_per_row)
  q = rng.normal(size=(b, t, kv, g, h)).astype(np.float32)
  k = rng.normal(size=(b, t, kv, h)).astype(np.float32)
  v = rng.normal(size=(b, t, kv, h)).astype(np.float32)
  seg = np.zeros((b, t), np.int32)
  for r, lengths in enumerate(lengths_per_row):
    start = 0
    for s, n in enumerate(lengths):
      seg[r, start:start + n] = s + 1
      start += n
  return q, k, v, seg


def _check_against_reference(out, q, k, v, seg, atol):
  out = np.asarray(out, np.float64)
  for r in range(seg.shape[0]):
    for s in range(1, seg[r].max() + 1):
      span = np.flatnonzero(seg[r] == s)
      want = _reference_attention(q[r, span], k[r, span], v[r, span])
      np.testing.assert_allclose(out[r, span], want, atol=atol)
    assert np.all(out[r, seg[r] == 0] == 0)


@pytest.mark.parametrize("impl,block", [("dense", 512), ("blocked", 8), ("blocked", 13)])
def test_segment_attention_matches_each_sequence_alone(impl, block):
  q, k, v, seg = _packed_case([[7, 20, 3], [40], [1, 1, 12, 5]], t=45)
  out = attention(q, k, v, jnp.asarray(seg), impl=impl, block=block)
  _check_against_reference(out, q, k, v, seg, atol=2e-5)


def test_blocked_segment_gradient_matches_dense():
  q, k, v, seg = _packed_case([[9, 14], [5, 5, 5, 6]], t=24, seed=1)
  w = np.random.default_rng(2).normal(size=q.shape).astype(np.float32)
  loss = lambda impl: lambda q, k, v: jnp.sum(
      attention(q, k, v, jnp.asarray(seg), impl=impl, block=8) * w)
  grads = [jax.grad(loss(impl), argnums=(0, 1, 2))(q, k, v) for impl in ("dense", "blocked")]
  for dense, blocked in zip(*grads):
    np.testing.assert_allclose(blocked, dense, atol=2e-5)


def test_kernel_paths_with_segments_in_interpret_mode():
  # The GPU (Pallas flash) and TPU (splash) kernels' numerics, run by the interpreter.
  q, k, v, seg = _packed_case([[30, 50, 20], [100, 28]], t=128, seed=3, h=32)
  _check_against_reference(pallas_segment_attention(q, k, v, jnp.asarray(seg), interpret=True),
                           q, k, v, seg, atol=2e-5)
  _check_against_reference(splash_attention(q, k, v, jnp.asarray(seg), interpret=True),
                           q, k, v, seg, atol=2e-5)


def test_positions_restart_per_segment():
  seg = jnp.asarray([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
  np.testing.assert_array_equal(positions_from_segments(seg),
                                [[0, 1, 2, 0, 1, 0, 0, 1], list(range(8))])


def _hf_logprobs(hf_model, ids):
  import torch  # pylint: disable=g-import-not-at-top
  with torch.no_grad():
    logits = hf_model(torch.tensor([ids]).long()).logits[0].double()
    logp = torch.log_softmax(logits, -1)[:-1].gather(-1, torch.tensor(ids[1:])[:, None])
  return logp[:, 0].numpy()


@pytest.mark.parametrize("attention_impl", ["dense", "blocked"])
def test_packed_logprobs_match_transformers_per_sequence(ckpt, attention_impl):
  model, _ = load_hf(ckpt.path)
  model.set_memory_options(attention=attention_impl, attention_block=16)
  rng = np.random.default_rng(0)
  rows = [[23, 9, 31], [60], [4, 4, 40]]
  t = 64
  ids = np.zeros((len(rows), t), np.int32)
  seg = np.zeros((len(rows), t), np.int32)
  seqs = []
  for r, lengths in enumerate(rows):
    start = 0
    for s, n in enumerate(lengths):
      seq = rng.integers(3, 160, n).tolist()
      ids[r, start:start + n], seg[r, start:start + n] = seq, s + 1
      seqs.append((r, start, seq))
      start += n
  logp = np.asarray(jax.jit(lambda i, s: token_logprobs(model, i, s > 0, segment_ids_BxT=s))(
      ids, seg))
  for r, start, seq in seqs:
    assert logp[r, start] == 0  # a sequence's first token has no context
    np.testing.assert_allclose(logp[r, start + 1:start + len(seq)],
                               _hf_logprobs(ckpt.hf_model, seq), atol=1e-4)
  assert np.all(logp[seg == 0] == 0)
