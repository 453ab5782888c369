"""Gradients of the Pallas attention kernels that sit under ``jax.grad`` in an update:
the GPU flash kernel of packed rows and TPU splash attention, each run by Pallas's
interpreter, against a float64 NumPy reference whose forward and backward are
written out here (no JAX in it).

The reference, per row and query head n (kv head k(n)), with V(t) the keys s <= t of
query t's segment (segment ids > 0; a boolean mask is one segment on the real
tokens) and c = H^(-1/2):

  P = softmax_V(c Q K^T),  O = P V,  O = 0 at padding;
  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),  dQ = c dS K,  dK = c dS^T Q,

dK and dV summed over the G query heads that share a kv head.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax.models import attention as attention_lib


def _visible(seg_T):
  """T x T: key s <= query t, both in one segment > 0."""
  t = len(seg_T)
  same = (seg_T[:, None] == seg_T[None, :]) & (seg_T[None, :] > 0)
  return same & np.tril(np.ones((t, t), bool))


def reference_vjp(q, k, v, seg, dout):
  """(out, dq, dk, dv) in float64 of packed causal attention (module docstring)."""
  q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
  b, t, kv, g, h = q.shape
  c = h ** -0.5
  out, dq = np.zeros_like(q), np.zeros_like(q)
  dk, dv = np.zeros_like(k), np.zeros_like(v)
  for r in range(b):
    mask = _visible(np.asarray(seg[r]))
    seen = mask.any(axis=1)
    for n in range(kv * g):
      kh, j = divmod(n, g)
      qn, kk, vv, do = q[r, :, kh, j], k[r, :, kh], v[r, :, kh], dout[r, :, kh, j]
      s = np.where(mask, c * qn @ kk.T, -np.inf)
      s = s - np.where(seen, s.max(axis=1), 0)[:, None]
      p = np.where(mask, np.exp(s), 0)
      p /= np.where(seen, p.sum(axis=1), 1)[:, None]
      do = np.where(seen[:, None], do, 0)  # the output is 0 at padding: no gradient there
      out[r, :, kh, j] = p @ vv
      dp = do @ vv.T
      ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))
      dq[r, :, kh, j] = c * ds @ kk
      dk[r, :, kh] += c * ds.T @ qn
      dv[r, :, kh] += p.T @ do
  return out, dq, dk, dv


def _case(lengths_per_row, t, seed, kv=2, g=2, h=32, left_pad=0):
  """q, k, v, segment ids (sequence j of a row is j + 1, after ``left_pad`` padding
  slots) and an output cotangent."""
  rng = np.random.default_rng(seed)
  b = len(lengths_per_row)
  q = rng.normal(size=(b, t, kv, g, h)).astype(np.float32)
  k = rng.normal(size=(b, t, kv, h)).astype(np.float32)
  v = rng.normal(size=(b, t, kv, h)).astype(np.float32)
  dout = rng.normal(size=q.shape).astype(np.float32)
  seg = np.zeros((b, t), np.int32)
  for r, lengths in enumerate(lengths_per_row):
    start = left_pad
    for j, n in enumerate(lengths):
      seg[r, start:start + n] = j + 1
      start += n
  return q, k, v, seg, dout


def _check(attend, q, k, v, mask, seg, dout, atol):
  """``attend``'s output and VJP against `reference_vjp` at every position."""
  out, vjp = jax.vjp(lambda q, k, v: attend(q, k, v, jnp.asarray(mask)), q, k, v)
  want = reference_vjp(q, k, v, seg, dout)
  np.testing.assert_allclose(np.asarray(out, np.float64), want[0], atol=atol)
  for name, got, ref in zip(("dq", "dk", "dv"), vjp(jnp.asarray(dout)), want[1:]):
    assert np.abs(ref).max() > 0.1, name  # the check can fail
    np.testing.assert_allclose(np.asarray(got, np.float64), ref, atol=atol, err_msg=name)


def test_reference_matches_finite_differences():
  """The hand-written backward is the forward's derivative (central differences)."""
  q, k, v, seg, dout = _case([[3, 4], [6]], t=8, seed=5, kv=1, g=2, h=4)
  out, dq, dk, dv = reference_vjp(q, k, v, seg, dout)
  loss = lambda q, k, v: float(np.sum(reference_vjp(q, k, v, seg, dout)[0] * dout))
  eps, rng = 1e-6, np.random.default_rng(0)
  for arg, grad in ((0, dq), (1, dk), (2, dv)):
    for _ in range(6):
      args = [np.asarray(x, np.float64) for x in (q, k, v)]
      idx = tuple(rng.integers(0, n) for n in args[arg].shape)
      args[arg][idx] += eps
      up = loss(*args)
      args[arg][idx] -= 2 * eps
      np.testing.assert_allclose((up - loss(*args)) / (2 * eps), grad[idx], atol=1e-6)
  assert np.all(out[seg == 0] == 0)


def test_pallas_gpu_kernel_gradient_in_interpret_mode():
  """Packed rows, several segments, GQA (G = 2), padding inside the kernel's block and
  a row padded up to it (T = 200 -> 256). Without the kernel's backward block sizes
  ``jax.grad`` raises before any number is computed."""
  q, k, v, seg, dout = _case([[60, 90, 40], [130, 5, 50]], t=200, seed=1)
  attend = lambda q, k, v, s: attention_lib.pallas_segment_attention(q, k, v, s, interpret=True)
  _check(attend, q, k, v, seg, seg, dout, atol=1e-5)


def test_packed_gpu_attention_on_a_pre_hopper_gpu_runs_the_pallas_gradient():
  """The GPU path of packed rows with the door's 'pallas' choice, differentiated."""
  q, k, v, seg, dout = _case([[100, 28]], t=128, seed=2, kv=1)
  attend = lambda q, k, v, s: attention_lib.packed_gpu_attention(q, k, v, s, kernel="pallas")
  _check(attend, q, k, v, seg, seg, dout, atol=1e-5)


@pytest.mark.parametrize("mask", ["segments", "left", "right"])
def test_splash_gradient_in_interpret_mode(mask):
  """Splash attention under ``jax.grad``: packed rows by segment id, and rows whose
  boolean mask is one span (left or right padded), which it rotates to slot 0."""
  if mask == "segments":
    q, k, v, seg, dout = _case([[60, 90, 40], [130, 5, 50]], t=200, seed=3)
    kv_mask = seg
  else:
    lengths = [[150], [77]]
    q, k, v, seg, dout = _case(lengths, t=200, seed=4)
    if mask == "left":
      seg = seg[:, ::-1].copy()  # the same spans at the rows' ends
    kv_mask = seg > 0
  attend = lambda q, k, v, m: attention_lib.splash_attention(q, k, v, m, interpret=True)
  _check(attend, q, k, v, kv_mask, seg, dout, atol=1e-5)
