"""The projection matmul of every decoder layer, with a weight gradient that suits XLA:CPU.

``linear(x, w, in_dims)`` contracts the last ``in_dims`` axes of ``x`` with the
first ``in_dims`` axes of ``w`` (``btd,dnh->btnh`` or ``btnh,nhd->btd``) as one
2-D product ``x_MxK @ w_KxN``. Its gradients are

.. math::
    \\partial x = g\\, w^\\top, \\qquad \\partial w = x^\\top g = (g^\\top x)^\\top.

On CPU the weight gradient contracts over the M = B x T token axis, which
XLA:CPU's dot kernels want as the minor axis of the left operand, so plain
autodiff makes XLA transpose one (B x T)-row activation inside an
elementwise fusion, writing it with a stride of M floats. The custom
backward instead transposes the *narrower* of ``x`` and ``g`` as a separate,
materialised array (an ``optimization_barrier`` keeps XLA from folding the
transpose back into the producer) and picks the product order that needs no
other copy. Same values up to float rounding (the sum order differs); on the
benchmark model's update this took the value-and-grad from 8.96 to 7.06
CPU-seconds (BENCHMARKS.md, speed). Other backends transpose inside their
matmul libraries for free, so they keep plain autodiff.
"""

from __future__ import annotations

import math

import jax


def _weight_grad(x_MxK, g_MxN):
  """x^T g, with only the narrower operand transposed (K <= N: x, else g)."""
  if x_MxK.shape[1] <= g_MxN.shape[1]:
    return jax.lax.optimization_barrier(x_MxK.T) @ g_MxN
  return (jax.lax.optimization_barrier(g_MxN.T) @ x_MxK).T


@jax.custom_vjp
def _matmul_cpu(x_MxK, w_KxN):
  return x_MxK @ w_KxN


def _matmul_fwd(x_MxK, w_KxN):
  return x_MxK @ w_KxN, (x_MxK, w_KxN)


def _matmul_bwd(res, g_MxN):
  x_MxK, w_KxN = res
  return g_MxN @ w_KxN.T, _weight_grad(x_MxK, g_MxN).astype(w_KxN.dtype)


_matmul_cpu.defvjp(_matmul_fwd, _matmul_bwd)


def matmul(x_MxK, w_KxN):
  """``x @ w`` for 2-D operands of one dtype; the CPU backward above, plain elsewhere."""
  if jax.default_backend() == "cpu":
    return _matmul_cpu(x_MxK, w_KxN)
  return x_MxK @ w_KxN


def linear(x, w, in_dims: int = 1):
  """Contracts the last ``in_dims`` axes of ``x`` with the first ``in_dims`` of ``w``."""
  lead, k_in = x.shape[:x.ndim - in_dims], w.shape[:in_dims]
  if x.shape[x.ndim - in_dims:] != k_in:
    raise ValueError(f"linear: x {x.shape} and w {w.shape} disagree on {in_dims} axes")
  out = w.shape[in_dims:]
  y_MxN = matmul(x.reshape(math.prod(lead), math.prod(k_in)),
                 w.reshape(math.prod(k_in), math.prod(out)))
  return y_MxN.reshape(lead + out)
