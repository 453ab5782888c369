"""Random operands of a decode step and float64 NumPy's attention over each row's live
slots [start, end): the reference of the live-span kernels' tests."""

import numpy as np


def operands(seed, b, k, g, h, s):
  """(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH) in float32, in the cache layouts the model keeps."""
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(b, k, g, h)).astype(np.float32),
          rng.normal(size=(b, k, h, s)).astype(np.float32),
          rng.normal(size=(b, k, s, h)).astype(np.float32))


def reference(q, k, v, start, end):
  """Row b's queries over its slots [start[b], end[b]), scaled by head_dim ** -0.5."""
  out = np.zeros(q.shape, np.float64)
  for b in range(len(q)):
    live = slice(start[b], end[b])
    scores = np.einsum("kgh,khs->kgs", q[b].astype(np.float64), k[b][:, :, live])
    scores *= q.shape[-1] ** -0.5
    p = np.exp(scores - scores.max(-1, keepdims=True))
    out[b] = np.einsum("kgs,ksh->kgh", p / p.sum(-1, keepdims=True), v[b][:, live])
  return out
