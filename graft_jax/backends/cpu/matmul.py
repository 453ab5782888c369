"""A 2-D matmul whose weight gradient suits XLA:CPU (`graft_jax.backends.matmul` on a CPU).

For ``x_MxK @ w_KxN`` the gradients are

.. math::
    \\partial x = g\\, w^\\top, \\qquad \\partial w = x^\\top g = (g^\\top x)^\\top.

The weight gradient contracts over the M = B x T token axis, which XLA:CPU's
dot kernels want as the minor axis of the left operand, so plain autodiff makes
XLA transpose one (B x T)-row activation inside an elementwise fusion, writing
it with a stride of M floats. The custom backward instead transposes the
*narrower* of ``x`` and ``g`` as a separate, materialised array (an
``optimization_barrier`` keeps XLA from folding the transpose back into the
producer) and picks the product order that needs no other copy. Same values up
to float rounding (the sum order differs); the update's speed with and without
it is in BENCHMARKS.md. Other backends transpose inside their matmul libraries
for free, so they keep plain autodiff and never trace this.
"""

from __future__ import annotations

import jax


def _weight_grad(x_MxK, g_MxN):
  """x^T g, with only the narrower operand transposed (K <= N: x, else g)."""
  if x_MxK.shape[1] <= g_MxN.shape[1]:
    return jax.lax.optimization_barrier(x_MxK.T) @ g_MxN
  return (jax.lax.optimization_barrier(g_MxN.T) @ x_MxK).T


@jax.custom_vjp
def matmul_cpu(x_MxK, w_KxN):
  """``x @ w`` for 2-D operands of one dtype, with the backward above."""
  return x_MxK @ w_KxN


def _matmul_fwd(x_MxK, w_KxN):
  return x_MxK @ w_KxN, (x_MxK, w_KxN)


def _matmul_bwd(res, g_MxN):
  x_MxK, w_KxN = res
  return g_MxN @ w_KxN.T, _weight_grad(x_MxK, g_MxN).astype(w_KxN.dtype)


matmul_cpu.defvjp(_matmul_fwd, _matmul_bwd)
