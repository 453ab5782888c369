"""One optimizer step per minibatch, its gradient accumulated over micro-batches of rows.

A minibatch of B rows padded to T tokens is cut into M micro-batches of R rows,
R = (``micro_batch_tokens`` // T) per device times the devices that split rows
(verl's ``ppo_max_token_len_per_gpu``). A loop over the M micro-batches
(``shape_grads``; a scan when M is fixed) adds each one's fp32 gradient, then one
optimizer step runs, so peak activations are those of one micro-batch. The result
is the unsplit minibatch's gradient, because every loss term is a mean over the *whole*
minibatch: each micro-batch divides its sums by the minibatch's counts
(``num_tokens`` for the clipped token loss, ``num_sgt_tokens`` for SGT,
``num_rows`` for HACPO's sequence mean and KL), so

.. math::
    \\nabla L = \\sum_{m=1}^{M} \\nabla \\frac{S_m}{N}, \\qquad
    N = \\sum_m n_m \\quad (\\text{not } \\tfrac{1}{M}\\sum_m S_m / n_m),

and a budget that splits a group (R not a multiple of n) changes nothing.
With a mesh the program is compiled with explicit output shardings: params
and optimizer state leave the step placed exactly as they came in.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from graft_jax.distributed import to_global
from graft_jax.sharding import batch_shards, batch_sharding
from graft_jax.train import length_packing
from graft_jax.train.update import loss_fn, to_device_batch, update_minibatch

# Metrics that are already divided by whole-minibatch counts: micro-batches add up.
_SUMMED = ("loss", "pg_loss", "sgt_loss", "kl_ref", "objective_sum", "row_count")
# Host counts `packed_grads` adds to its metrics: the rows left out and the rows run.
ROW_COUNTS = ("silent_rows", "rows_run")


def rows_per_micro(num_rows: int, length: int, budget_tokens: int, shards: int = 1) -> int:
  """Rows per micro-batch: as many rows of ``length`` tokens as fit ``budget_tokens``
  on each device (at least one), times the ``shards`` devices that split rows.
  A budget of 0 means no split."""
  per_device = -(-num_rows // shards)
  if budget_tokens > 0:
    per_device = min(per_device, max(1, budget_tokens // length))
  return per_device * shards


def minibatch_totals(batch: dict) -> dict:
  """The whole minibatch's loss denominators, counted on the host (exact integers)."""
  mask_BxT = np.asarray(batch["resp_mask"], np.float32)
  return {"num_tokens": (mask_BxT * batch["ppo"][:, None]).sum(),
          "num_sgt_tokens": (mask_BxT * batch["sgt"][:, None]).sum(),
          "num_rows": np.float32((mask_BxT.sum(axis=1) > 0).sum())}


def silent_rows(batch: dict, spec) -> np.ndarray:
  """Rows with response tokens whose every loss term is zero for any parameters.

  Under the clipped token loss (no KL, no entropy term) a PPO row contributes
  :math:`w_j \\min(\\rho_{j,t} A_j, \\operatorname{clip}(\\rho_{j,t}) A_j)`,
  which is 0 with its gradient when :math:`w_j A_j = 0`: the rows of all-fail and
  all-pass groups, and grafted rows the gate weighted to 0. Such a row adds nothing
  to the gradient but its tokens to the denominator, so its forward and backward
  pass can be left out without changing the minibatch's gradient. A row in SGT's
  NLL term (``sgt_coef``) is never silent; HACPO's loss (a KL to the reference on
  every row) has none.
  """
  if spec.kind != "ppo":
    return np.zeros(len(batch["ids"]), bool)
  has_tokens_B = np.asarray(batch["resp_mask"]).sum(axis=1) > 0
  return has_tokens_B & ~has_signal(np.asarray(batch["ppo"]) > 0, np.asarray(batch["sgt"]) > 0,
                                    batch["adv"], batch["weight"], spec)


def has_signal(ppo_B, sgt_B, adv_B, weight_B, spec) -> np.ndarray:
  """Rows with a loss term that can be non-zero (`silent_rows`): a PPO row with
  w_j A_j != 0, or an SGT row when the NLL term is on; every row under HACPO."""
  if spec.kind != "ppo":
    return np.ones(len(ppo_B), bool)
  signal_B = np.asarray(ppo_B, bool) & (np.asarray(adv_B) * np.asarray(weight_B) != 0)
  if spec.sgt_coef:
    signal_B |= np.asarray(sgt_B, bool)
  return signal_B


def loss_units(batch: dict, by_rows: bool = False) -> np.ndarray:
  """Per row, the units its loss is averaged over: PPO tokens, or 1 for a row with any
  response token when ``by_rows`` (HACPO's sequence mean)."""
  mask_BxT = np.asarray(batch["resp_mask"], np.float32)
  if by_rows:
    return (mask_BxT.sum(axis=1) > 0).astype(np.float32)
  return (mask_BxT * np.asarray(batch["ppo"], np.float32)[:, None]).sum(axis=1)


def split_minibatch(batch: dict, rows: int, *, by_rows: bool = False) -> dict:
  """Host arrays B x ... -> M x R x ... (zero rows pad the last micro-batch; an
  all-zero mask keeps them out of every sum), plus the minibatch's totals and
  each micro-batch's ``share`` of the loss units (tokens, or rows if ``by_rows``)
  for averaging fraction metrics."""
  b = len(batch["ids"])
  m = -(-b // rows)
  totals = minibatch_totals(batch)
  micro = {}
  for k, v in batch.items():
    v = np.asarray(v)
    padded = np.zeros((m * rows,) + v.shape[1:], v.dtype)
    padded[:b] = v
    micro[k] = padded.reshape((m, rows) + v.shape[1:])
  units_M = np.zeros(m * rows, np.float32)
  units_M[:b] = loss_units(batch, by_rows)
  units_M = units_M.reshape(m, rows).sum(axis=1)
  micro["share"] = (units_M / max(float(units_M.sum()), 1.0)).astype(np.float32)
  if m > 1:  # one micro-batch is the minibatch: its own counts are the totals
    micro.update({k: np.full(m, v, np.float32) for k, v in totals.items()})
  return micro


def combine_metric(key: str, total, value, share):
  """A metric over micro-batches so far (``total``) with one more micro-batch's: maxima
  by maximum, whole-minibatch sums by sum, fractions weighted by its ``share``."""
  if key.endswith("_max"):
    return jnp.maximum(total, value)
  return total + (value if summed_metric(key) else value * share)


def summed_metric(key: str) -> bool:
  """Whether a metric is already divided by whole-minibatch counts, or a plain sum or
  count (micro-batches add up), rather than a fraction to weight by each micro-batch's
  share of loss units."""
  return key in _SUMMED or key.endswith(("_tokens", "_clipped", "_sum"))


def pooled_gap_mean(metrics: dict) -> dict:
  """``metrics`` with the sampler gap's mean recomputed from its pooled sum and count
  (a mean over micro-batches' own tokens, which the loss units do not weight)."""
  if "logp_mismatch_sum" in metrics:
    metrics["logp_mismatch_mean"] = (metrics["logp_mismatch_sum"]
                                     / jnp.maximum(metrics["logp_mismatch_tokens"], 1.0))
  return metrics


def accumulated_grads(params, micro, update_index, *, graphdef, spec, grad_sharding=None):
  """(fp32 gradient summed over the micro-batches, combined metrics): `shape_grads` over
  all M of them (a loop, so one micro-batch's activations are live at a time)."""
  if micro["ids"].shape[0] == 1:  # no accumulation: the plain minibatch gradient
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, jax.tree.map(lambda x: x[0], micro), graphdef, spec, update_index)
    return grads, dict(metrics, loss=loss)
  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
  return shape_grads(params, zeros, micro, micro["ids"].shape[0], update_index,
                     graphdef=graphdef, spec=spec, grad_sharding=grad_sharding)


def accumulated_update(params, opt_state, micro, update_index, *, graphdef, tx, spec,
                       grad_sharding=None):
  """`accumulated_grads`, then one optimizer step."""
  grads, metrics = accumulated_grads(params, micro, update_index, graphdef=graphdef, spec=spec,
                                     grad_sharding=grad_sharding)
  params, opt_state, grad_norm = apply_grads(params, opt_state, grads, tx=tx)
  return params, opt_state, dict(metrics, grad_norm=grad_norm)


def compiled_update(policy, spec):
  """The policy's accumulated-update program for ``spec``, built once; with a
  mesh its outputs carry the policy's parameter and optimizer shardings."""
  if spec not in policy.compiled:
    fn = functools.partial(accumulated_update, graphdef=policy.graphdef, tx=policy.tx, spec=spec,
                           grad_sharding=policy.param_sharding)
    kw = {}
    if policy.mesh is not None:
      replicated = jax.sharding.NamedSharding(policy.mesh, jax.sharding.PartitionSpec())
      kw["out_shardings"] = (policy.param_sharding, policy.opt_sharding, replicated)
    policy.compiled[spec] = jax.jit(fn, donate_argnums=(0, 1), **kw)
  return policy.compiled[spec]


def micro_grads(params, acc, mb, update_index, *, graphdef, spec):
  """``acc`` plus one micro-batch's fp32 gradient (its sums over the minibatch's
  counts, which ``mb`` carries), and its metrics."""
  (loss, metrics), g = jax.value_and_grad(loss_fn, has_aux=True)(
      params, mb, graphdef, spec, update_index)
  return jax.tree.map(lambda a, x: a + x.astype(jnp.float32), acc, g), dict(metrics, loss=loss)


def apply_grads(params, opt_state, grads, *, tx):
  """One optimizer step with the accumulated gradient."""
  grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
  updates, opt_state = tx.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, optax.tree.norm(grads)


def shape_grads(params, acc, stack, count, update_index, *, graphdef, spec, grad_sharding=None):
  """``acc`` plus the fp32 gradients of the first ``count`` micro-batches of ``stack``
  (all of one shape, stacked on a leading axis; the rest is padding that never runs),
  and the minibatch's metrics: whole-minibatch means and counts add up, fractions
  are weighted by each micro-batch's ``share`` of loss units. A ``fori_loop`` whose
  trip count comes from the host: one program per stack shape whatever the count,
  and what a call costs beyond its micro-batches is paid once per shape, not once
  per micro-batch (on the benchmark's update, 11 micro-batches in one call took
  about 0.83x the time of 11 calls; BENCHMARKS.md)."""

  def one(i, carry):
    acc, total = carry
    mb = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, keepdims=False), stack)
    acc, metrics = micro_grads(params, acc, mb, update_index, graphdef=graphdef, spec=spec)
    if grad_sharding is not None:
      acc = jax.lax.with_sharding_constraint(acc, grad_sharding)
    return acc, {k: combine_metric(k, total[k], v, mb["share"]) for k, v in metrics.items()}

  first = jax.tree.map(lambda x: x[0], stack)
  shapes = jax.eval_shape(lambda: micro_grads(params, acc, first, update_index,
                                              graphdef=graphdef, spec=spec)[1])
  total = jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), shapes)
  acc, total = jax.lax.fori_loop(0, count, one, (acc, total))
  return acc, pooled_gap_mean(total)


def packed_programs(policy, spec):
  """The policy's (gradient of the micro-batches of one shape, optimizer step) programs
  for ``spec``, built once; jit compiles the first one once per stack shape
  (slots, R, L), and the slots depend on the minibatch's rows and R only."""
  key = ("packed", spec)
  if key not in policy.compiled:
    kw_grad, kw_apply = {}, {}
    if policy.mesh is not None:
      replicated = jax.sharding.NamedSharding(policy.mesh, jax.sharding.PartitionSpec())
      kw_grad["out_shardings"] = (policy.param_sharding, replicated)
      kw_apply["out_shardings"] = (policy.param_sharding, policy.opt_sharding, replicated)
    policy.compiled[key] = (
        jax.jit(functools.partial(shape_grads, graphdef=policy.graphdef, spec=spec,
                                  grad_sharding=policy.param_sharding),
                donate_argnums=(1,), **kw_grad),
        jax.jit(functools.partial(apply_grads, tx=policy.tx), donate_argnums=(0, 1, 2),
                **kw_apply))
  return policy.compiled[key]


def packed_update(policy, params, opt_state, batch: dict, update_index, spec, *,
                  micro_batch_tokens: int, skip_silent: bool = False, streams: int = 1):
  """One optimizer step over micro-batches packed by length
  (``graft_jax.train.length_packing``): the fp32 gradient is accumulated over them
  (`packed_grads`), then one optimizer step runs (also when every row is silent:
  AdamW's moments and weight decay still move the parameters)."""
  mesh = policy.mesh
  with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
    if mesh is not None:
      # A no-op when already placed; state restored from a checkpoint may not be.
      params = jax.device_put(params, policy.param_sharding)
      opt_state = jax.device_put(opt_state, policy.opt_sharding)
    grads, metrics = packed_grads(policy, params, batch, update_index, spec,
                                  micro_batch_tokens=micro_batch_tokens, skip_silent=skip_silent,
                                  streams=streams)
    params, opt_state, grad_norm = packed_programs(policy, spec)[1](params, opt_state, grads)
  return params, opt_state, dict(metrics, grad_norm=grad_norm)


def packed_grads(policy, params, batch: dict, update_index, spec, *, micro_batch_tokens: int,
                 skip_silent: bool = False, streams: int = 1):
  """(fp32 gradient of the minibatch's loss, its metrics), summed over micro-batches
  packed by length; each divides its sums by the whole minibatch's counts, so the sum
  is the unsplit gradient. The micro-batches of each shape (R, L) run in one call of
  `shape_grads`, stacked in ``ceil(B / R)`` slots (as many as that shape can have).

  With ``skip_silent`` the `silent_rows` are left out of the micro-batches: the
  gradient and the summed metrics (losses, token counts) are unchanged, since the
  denominators still count their tokens; the fractions (ratio, KL, clip, the
  sampler gap) are then over the rows that ran. ``silent_rows`` counts the rows left
  out and ``rows_run`` those that ran; with none to run, no micro-batch runs (the
  fractions read 0 beside ``rows_run`` = 0) and the gradient is zero.

  With ``streams`` > 1 (and no mesh) each shape's micro-batches are cut into up to
  that many runs of the plan, and lane j takes the j-th run of every shape: the
  lanes run side by side, each from its own host thread into its own fp32
  accumulator, through the same programs (the stack keeps its ``ceil(B / R)``
  slots), and the accumulators are then added in lane order. On a CPU this keeps
  the cores busy while one lane runs operations XLA gives a single core. The sum
  is the same gradient added in another order, so it differs from one lane's by
  rounding only; it is the same for the same ``streams`` on every run.
  """
  mesh = policy.mesh
  shards = batch_shards(mesh) if mesh is not None else 1
  lengths_B = np.asarray(batch["attn"]).sum(axis=1)
  b = len(lengths_B)
  silent_B = silent_rows(batch, spec) if skip_silent else np.zeros(b, bool)
  run_B = np.flatnonzero(~silent_B)
  plan = length_packing.plan_micro_batches(lengths_B[run_B], batch["ids"].shape[1],
                                           micro_batch_tokens, shards, num_rows=b)
  plan = [(run_B[idx], rows, length) for idx, rows, length in plan]
  count_of = {}
  if not plan:  # every row silent: one stack of the longest row's shape, run 0 times
    rows, length = length_packing.plan_micro_batches(lengths_B, batch["ids"].shape[1],
                                                     micro_batch_tokens, shards)[0][1:]
    plan, count_of = [(np.arange(min(rows, b)), rows, length)], {(rows, length): 0}
  totals = {k: np.float32(v) for k, v in minibatch_totals(batch).items()}
  units_B = loss_units(batch, by_rows=spec.kind == "hacpo")
  share_M = np.asarray([units_B[idx].sum() for idx, _, _ in plan], np.float32)
  share_M /= max(float(share_M.sum()), 1.0)
  grad_fn = packed_programs(policy, spec)[0]
  # On the parameters' placement; without a mesh left uncommitted like them, so the
  # programs' outputs keep the placement the sampler and the next step compiled for.
  zeros = lambda: jax.tree.map(lambda p: jnp.zeros(
      p.shape, jnp.float32, device=p.sharding if mesh is not None else None), params)
  lanes = [[] for _ in range(streams if mesh is None else 1)]
  for (rows, length), entries in length_packing.by_shape(plan):
    count = count_of.get((rows, length))
    cut = np.linspace(0, len(entries), min(len(lanes), len(entries)) + 1).round().astype(int)
    for lane, (a, z) in zip(lanes, zip(cut[:-1], cut[1:])):
      part = entries[a:z]  # sizes differ by at most one; each a run of the plan
      stack = length_packing.stack_micro_batches(batch, part, rows, length,
                                                 slots=-(-b // rows))
      stack.update({k: np.full(len(stack["ids"]), v, np.float32) for k, v in totals.items()})
      stack["share"] = np.zeros(len(stack["ids"]), np.float32)
      stack["share"][:len(part)] = share_M[[i for i, _ in part]]
      if mesh is not None:
        # Each process hands over only the rows its devices hold (graft_jax.distributed).
        stack = {k: to_global(v, batch_sharding(mesh, ndim=v.ndim, row_dim=1))
                 for k, v in stack.items()}
      lane.append((stack, np.int32(len(part) if count is None else count)))

  def run(lane):
    """(this lane's summed gradient, its metrics combined over its calls; None if it has none)."""
    acc, metrics_S = zeros(), []
    for stack, count in lane:
      acc, metrics = grad_fn(params, acc, stack, count, update_index)
      metrics_S.append(metrics)
    return acc, (combined(metrics_S) if metrics_S else None)

  if len(lanes) == 1:
    acc, metrics = run(lanes[0])
  else:  # each lane from its own thread, into its own accumulator; then their sum
    with concurrent.futures.ThreadPoolExecutor(len(lanes)) as pool:
      done = list(pool.map(lambda lane: jax.block_until_ready(run(lane)), lanes))
    some = next(m for _, m in done if m is not None)
    nothing = {k: np.zeros(np.shape(v), np.float32) for k, v in some.items()}  # an empty lane
    # Always as many lanes, so one program sums them whichever lanes had work.
    acc, metrics = _sum_lanes([a for a, _ in done],
                              [nothing if m is None else m for _, m in done])
  metrics = pooled_gap_mean(metrics)
  metrics.update(silent_rows=np.float32(silent_B.sum()),
                 rows_run=totals["num_rows"] - np.float32(silent_B.sum()))
  return acc, metrics


def update(policy, params, opt_state, batch: dict, update_index, spec, *,
           micro_batch_tokens: int = 0, pack_by_length: bool = False, skip_silent: bool = False,
           streams: int = 1):
  """One optimizer step on a host minibatch; ``params`` and ``opt_state`` are donated.

  Without a mesh and with the minibatch under the budget this is the plain
  ``update_minibatch`` (one program, unchanged numerics), unless ``skip_silent``
  with packing says otherwise (below). Otherwise the minibatch is
  cut by ``micro_batch_tokens``: packed by length (``packed_update``) or, without
  ``pack_by_length``, into equal micro-batches of the padded length under one scan.
  ``skip_silent`` leaves the `silent_rows` out of packed micro-batches (the same
  gradient, less work); with packing on it sends a minibatch under the budget
  down the packed path too, so that no silent row ever runs
  (``Method.old_logp_deferred`` relies on it). The unpacked path runs every row.
  ``streams`` is `packed_grads`'s: lanes of packed micro-batches side by side.
  """
  b, t = batch["ids"].shape
  mesh = policy.mesh
  shards = batch_shards(mesh) if mesh is not None else 1
  rows = rows_per_micro(b, t, micro_batch_tokens, shards)
  packed = pack_by_length and micro_batch_tokens > 0
  if mesh is None and rows >= b and not (packed and skip_silent):
    return update_minibatch(params, opt_state, to_device_batch(batch), update_index,
                            graphdef=policy.graphdef, tx=policy.tx, spec=spec)
  if packed:
    return packed_update(policy, params, opt_state, batch, update_index, spec,
                         micro_batch_tokens=micro_batch_tokens, skip_silent=skip_silent,
                         streams=streams)
  micro = split_minibatch(batch, rows, by_rows=spec.kind == "hacpo")
  if mesh is not None:
    # Each process hands over only the rows its devices hold (graft_jax.distributed).
    micro = {k: to_global(v, batch_sharding(mesh, ndim=v.ndim, row_dim=1))
             for k, v in micro.items()}
    # A no-op when already placed; state restored from a checkpoint may not be.
    params = jax.device_put(params, policy.param_sharding)
    opt_state = jax.device_put(opt_state, policy.opt_sharding)
  with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
    return compiled_update(policy, spec)(params, opt_state, micro, update_index)


def combined(metrics_S: list[dict]) -> dict:
  """The metrics of several `shape_grads` calls over one minibatch as one call's:
  maxima by maximum, everything else added (fractions are already weighted by share)."""
  return {k: functools.reduce(lambda a, b, k=k: combine_metric(k, a, b, 1.0),
                              [m[k] for m in metrics_S]) for k in metrics_S[0]}


@jax.jit
def _sum_lanes(accs, metrics_L):
  """The lanes' gradients added leafwise in lane order, and their metrics `combined`."""
  return jax.tree.map(lambda *leaves: functools.reduce(jnp.add, leaves), *accs), \
      combined(metrics_L)
