"""Running the decoder's blocks: unrolled or under ``jax.lax.scan``, each with optional remat.

For the scan, blocks are grouped by their period: the smallest p with block i
built like block i mod p (p = 1 for Qwen3 and Llama, p = 4 for SmolLM3, whose
every 4th layer is NoPE). The p blocks of one period form the scan body, and
the scan runs over parameters stored stacked over periods
(``graft_jax.models.layer_storage``), so the body compiles once however deep
the model is and the gradient comes out stacked too.

Remat (``jax.checkpoint``) on a block keeps only what the policy saves and
recomputes the rest in the backward pass:
``none`` keeps everything, ``full`` keeps only the block's input,
``dots_saveable`` keeps matmul outputs, ``dots_no_batch`` keeps matmul outputs
without batch dimensions (the weight-gradient operands).
"""

from __future__ import annotations

import jax
from flax import nnx

REMAT_POLICIES = {
    "full": None,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def scan_period(graphdefs) -> int:
  """The smallest p dividing the depth with graphdefs[i] == graphdefs[i % p]."""
  n = len(graphdefs)
  for p in range(1, n + 1):
    if n % p == 0 and all(graphdefs[i] == graphdefs[i % p] for i in range(n)):
      return p
  return n


def _period_fn(graphdefs, remat: str):
  """(states of one period's blocks, x, positions, mask) -> x after those blocks; each
  block is its own checkpoint, so the backward pass recomputes one block at a time."""
  if remat != "none" and remat not in REMAT_POLICIES:
    raise ValueError(f"remat must be 'none' or one of {sorted(REMAT_POLICIES)}, got {remat!r}")

  def one_block(graphdef):
    def call(state, x_BxTxD, positions_BxT, kv_mask_BxT):
      return nnx.merge(graphdef, state)(x_BxTxD, positions_BxT, kv_mask_BxT)[0]
    return call if remat == "none" else jax.checkpoint(call, policy=REMAT_POLICIES[remat])

  calls = [one_block(g) for g in graphdefs]

  def run(states, x_BxTxD, positions_BxT, kv_mask_BxT):
    for call, state in zip(calls, states):
      x_BxTxD = call(state, x_BxTxD, positions_BxT, kv_mask_BxT)
    return x_BxTxD

  return run


def run_blocks(blocks, x_BxTxD, positions_BxT, kv_mask_BxT, *, remat: str = "none"):
  """x after every block of per-layer storage, in order, each under the remat policy."""
  blocks = list(blocks)
  if remat == "none":
    for block in blocks:
      x_BxTxD, _ = block(x_BxTxD, positions_BxT, kv_mask_BxT)
    return x_BxTxD
  split = [nnx.split(b) for b in blocks]
  return _period_fn([g for g, _ in split], remat)([s for _, s in split], x_BxTxD,
                                                   positions_BxT, kv_mask_BxT)


def scan_stacks(stacks, x_BxTxD, positions_BxT, kv_mask_BxT, *, remat: str = "none"):
  """x after every block of stacked storage (``layer_storage.stack_blocks``): one
  ``jax.lax.scan`` step per period, over the stacked parameters as stored."""
  split = [nnx.split(s) for s in stacks]
  body = _period_fn([g for g, _ in split], remat)

  def step(x, period_states):
    return body(period_states, x, positions_BxT, kv_mask_BxT), None

  x_BxTxD, _ = jax.lax.scan(step, x_BxTxD, [s for _, s in split])
  return x_BxTxD
