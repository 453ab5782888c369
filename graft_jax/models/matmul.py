"""The projection matmul of every decoder layer: ``linear``, one 2-D product.

``linear(x, w, in_dims)`` contracts the last ``in_dims`` axes of ``x`` with the
first ``in_dims`` axes of ``w`` (``btd,dnh->btnh`` or ``btnh,nhd->btd``) as one
``x_MxK @ w_KxN``, through `graft_jax.backends.matmul` (which keeps a
backend's own matmul, or its gradient, where that backend needs one).
"""

from __future__ import annotations

import math

from graft_jax import backends


def linear(x, w, in_dims: int = 1):
  """Contracts the last ``in_dims`` axes of ``x`` with the first ``in_dims`` of ``w``."""
  lead, k_in = x.shape[:x.ndim - in_dims], w.shape[:in_dims]
  if x.shape[x.ndim - in_dims:] != k_in:
    raise ValueError(f"linear: x {x.shape} and w {w.shape} disagree on {in_dims} axes")
  out = w.shape[in_dims:]
  y_MxN = backends.matmul(x.reshape(math.prod(lead), math.prod(k_in)),
                          w.reshape(math.prod(k_in), math.prod(out)))
  return y_MxN.reshape(lead + out)
