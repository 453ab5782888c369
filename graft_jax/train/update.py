"""The PPO update: one optimizer step per minibatch, its fp32 gradient accumulated over
micro-batches packed by length.

A minibatch's rows are cut into micro-batches of at most ``micro_batch_tokens``
per device (verl's ``ppo_max_token_len_per_gpu``), packed by length
(``graft_jax.packing.length_packing``); a loop over the micro-batches of each
shape adds each one's fp32 gradient, then one optimizer step runs, so peak
activations are those of one micro-batch. The result is the unsplit
minibatch's gradient, because every loss term is a mean over the *whole*
minibatch: each micro-batch divides its sums by the minibatch's counts (the
method's ``loss_fn.totals``), so

.. math::
    \\nabla L = \\sum_{m=1}^{M} \\nabla \\frac{S_m}{N}, \\qquad
    N = \\sum_m n_m \\quad (\\text{not } \\tfrac{1}{M}\\sum_m S_m / n_m),

and a budget that splits a group changes nothing. The update owns pi_old: rows
whose old log-probs come from its own forward (``fresh_B``: the parameters are
still the behavior policy's) get that forward's stop-gradient as ``old_logp``
before the loss sees the batch, so a loss always reads a true pi_old. Rows without a loss term
(the method's ``has_signal``) are left out with ``skip_silent_rows``: the same
gradient, less work. The programs are compiled for every shape the run can
take on its first update (`length_packing.run_shapes`), so no later step
compiles. With a mesh the programs are compiled with explicit output
shardings: params and optimizer state leave the step placed as they came in.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from graft_jax.core import finite
from graft_jax import backends, distributed
from graft_jax.models import token_logprobs
from graft_jax.sharding import batch_shards, batch_sharding
from graft_jax.packing import length_packing
from graft_jax.train import packed_micro_batches
from graft_jax.outputs import finite_guard, metric_kinds as kinds
from graft_jax.train.update_rows import TOKEN_FIELDS, field_dtypes

# Tokens per gradient micro-batch when the config leaves it to the backend (0): on a
# CPU the speed benchmark's setting, whose working set stays in cache (BENCHMARKS.md).
CPU_MICRO_BATCH_TOKENS = 640


def micro_batch_budget(configured: int) -> int:
  """Tokens per device per micro-batch: ``configured``, or for 0 the choice of the backend
  programs are traced for (`backends.platform`, a planner's target under `traced_for`):
  `CPU_MICRO_BATCH_TOKENS` on a CPU, no split elsewhere (launch/plan.py says what fits)."""
  if configured:
    return configured
  return CPU_MICRO_BATCH_TOKENS if backends.platform() == "cpu" else 0


def make_optimizer(opt) -> optax.GradientTransformation:
  """AdamW with a global-norm clip, from a ``train.config.OptimizerConfig``."""
  if opt.schedule == "constant":
    lr = optax.constant_schedule(opt.lr)
  else:
    lr = optax.warmup_cosine_decay_schedule(0.0, opt.lr, max(opt.warmup_steps, 1), 10 ** 6)
  if opt.warmup_steps and opt.schedule == "constant":
    lr = optax.join_schedules([optax.linear_schedule(0.0, opt.lr, opt.warmup_steps), lr],
                              [opt.warmup_steps])
  adamw = optax.adamw(lr, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay)
  return optax.chain(optax.clip_by_global_norm(opt.grad_clip), adamw) if opt.grad_clip else adamw


def sampler_gap(old_logp_BxT, sampler_logp_BxT, mask_BxT) -> dict:
  """|old-policy - sampler| log-prob over the ``mask_BxT`` tokens: the sum and count a
  mean is pooled from over micro-batches and minibatches, and the max."""
  gap_BxT = jnp.abs(old_logp_BxT - sampler_logp_BxT) * mask_BxT
  return {**kinds.metrics(kinds.SUM, logp_mismatch_sum=gap_BxT.sum(),
                          logp_mismatch_tokens=mask_BxT.sum()),
          **kinds.metrics(kinds.MAX, logp_mismatch_max=gap_BxT.max())}


def with_fresh_old_logp(logp_BxT, batch, fresh_B):
  """(``batch`` whose ``fresh_B`` rows read ``stop_gradient(logp_BxT)`` as ``old_logp``,
  the gap to the sampler's log-probs those rows held). A batch without ``old_logp``
  (a loss without a ratio) is returned as it is."""
  if "old_logp" not in batch.__dataclass_fields__:
    return batch, {}
  fresh_BxT = batch.resp_mask * fresh_B[:, None]
  old_BxT = jnp.where(fresh_BxT > 0, jax.lax.stop_gradient(logp_BxT), batch.old_logp)
  return batch.replace(old_logp=old_BxT), sampler_gap(old_BxT, batch.old_logp, fresh_BxT)


def loss_and_metrics(params, rows, scalars, update_index, *, graphdef, loss):
  """The method's loss of one micro-batch (``rows``: the loss's batch and, per row,
  whether its old log-probs come from this forward; ``scalars``: the minibatch's
  totals)."""
  batch, fresh_B, *packing = rows
  model = nnx.merge(graphdef, params)
  if packing:  # packed rows (`packed_micro_batches`): the batch is their row view
    logp_BxT = packed_micro_batches.packed_logprobs_BxT(model, packing[0], batch.attn,
                                                        temperature=loss.temperature)
  else:
    logp_BxT = token_logprobs(model, batch.ids, batch.attn, temperature=loss.temperature)
  batch, gap = with_fresh_old_logp(logp_BxT, batch, fresh_B)
  value, metrics = loss(logp_BxT, batch, scalars, update_index)
  undeclared = [k for k, m in metrics.items() if not isinstance(m, kinds.Metric)]
  if undeclared:
    raise TypeError(f"{type(loss).__name__} returned metrics without a reducer "
                    f"({', '.join(undeclared)}): make them with metric_kinds.metrics")
  return value, dict(metrics, **gap, **kinds.metrics(kinds.MEAN, loss=value))


def micro_grads(params, acc, stack, scalars_S, count, update_index, *, graphdef, loss,
                grad_sharding=None):
  """``acc`` plus the fp32 gradients of the first ``count`` micro-batches of ``stack``
  (one shape, stacked on a leading axis; the rest is padding that never runs), and
  their metrics, each added by its reducer (`metric_kinds.add_micro_batch`: fractions
  weighted by each micro-batch's ``share`` of loss units). A ``fori_loop`` whose trip
  count comes from the host: one program per shape whatever the count."""
  grad_fn = jax.value_and_grad(functools.partial(loss_and_metrics, graphdef=graphdef, loss=loss),
                               has_aux=True)
  pick = lambda tree, i: jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, keepdims=False),
                                      tree)

  def one(i, carry):
    acc, total = carry
    scalars = pick(scalars_S, i)
    (_, metrics), g = grad_fn(params, pick(stack, i), scalars, update_index)
    acc = jax.tree.map(lambda a, x: a + x.astype(jnp.float32), acc, g)
    if grad_sharding is not None:
      acc = jax.lax.with_sharding_constraint(acc, grad_sharding)
    return acc, {k: kinds.add_micro_batch(total[k], m, scalars["share"])
                 for k, m in metrics.items()}

  shapes = jax.eval_shape(lambda: grad_fn(params, pick(stack, 0), pick(scalars_S, 0),
                                          update_index)[0][1])
  total = jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), shapes)
  return jax.lax.fori_loop(0, count, one, (acc, total))


def apply_grads(params, opt_state, grads, loss=0.0, *, tx, keep_old=False):
  """One optimizer step with the accumulated gradient, checked (`core.finite.checked`)."""
  grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
  updates, opt = tx.update(grads, opt_state, params)
  norm = optax.tree.norm(grads)
  state, flags_3 = finite.checked(loss, norm, (params, opt_state),
                                  (optax.apply_updates(params, updates), opt), keep_old=keep_old)
  return *state, norm, flags_3


def update_programs(graphdef, tx, loss, *, mesh=None, param_sharding=None, opt_sharding=None,
                    keep_old=False):
  """(the micro-batch gradient program, the optimizer-step program), jitted: the
  first donates the accumulator, the second the parameters and optimizer state."""
  kw_grad, kw_apply = {}, {}
  if mesh is not None:
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    kw_grad["out_shardings"] = (param_sharding, replicated)
    kw_apply["out_shardings"] = (param_sharding, opt_sharding, replicated, replicated)
  return (jax.jit(functools.partial(micro_grads, graphdef=graphdef, loss=loss,
                                    grad_sharding=param_sharding), donate_argnums=(1,), **kw_grad),
          jax.jit(functools.partial(apply_grads, tx=tx, keep_old=keep_old), donate_argnums=(0, 1),
                  **kw_apply))


def update_program(graphdef, params, tx, loss, *, rows: int, length: int, slots: int = 1,
                   mesh=None, param_sharding=None, opt_sharding=None):
  """The gradient program for micro-batches of ``rows`` x ``length`` (``slots`` of them
  stacked) and the optimizer-step program, with abstract arguments for each, so a
  planner can ``.lower(*args)`` them: ``((grads, grad_args), (apply, apply_args))``.
  ``params`` may be abstract (``jax.ShapeDtypeStruct``s)."""
  grads, apply = update_programs(graphdef, tx, loss, mesh=mesh, param_sharding=param_sharding,
                                 opt_sharding=opt_sharding)
  spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype)
  dtypes = field_dtypes(loss.Batch)
  stack = (loss.Batch(**{k: spec((slots, rows, length) if k in TOKEN_FIELDS else (slots, rows),
                                 dtypes[k]) for k in loss.Batch.__dataclass_fields__}),
           spec((slots, rows), jnp.float32))
  one_row = loss.Batch(**{k: np.zeros((1, 1) if k in TOKEN_FIELDS else (1,), dtypes[k])
                          for k in loss.Batch.__dataclass_fields__})
  scalars = {k: spec((slots,), jnp.float32) for k in ("share", *loss.totals(one_row))}
  acc = jax.tree.map(lambda p: spec(p.shape, jnp.float32), params)
  opt = jax.eval_shape(tx.init, params)
  index = spec((), jnp.int32)
  return ((grads, (params, acc, stack, scalars, index, index)),
          (apply, (params, opt, acc)))


def programs(policy, loss, keep_old=False):
  """The policy's `update_programs` for ``loss``, built once."""
  if (loss, keep_old) not in policy.compiled:
    policy.compiled[loss, keep_old] = update_programs(
        policy.graphdef, policy.tx, loss, mesh=policy.mesh, param_sharding=policy.param_sharding,
        opt_sharding=policy.opt_sharding, keep_old=keep_old)
  return policy.compiled[loss, keep_old]


def update(policy, params, opt_state, batch, loss, update_index, *, micro_batch_tokens: int,
           width: int, skip_silent: bool = True, fresh_B=None, packed: bool = False,
           skip_nonfinite: bool = False):
  """One optimizer step on a host minibatch (``loss.Batch`` of numpy arrays padded to
  ``width`` tokens, the run's length budget); ``params`` and ``opt_state`` are donated.

  The gradient is summed over micro-batches packed by length; the micro-batches of
  one shape run in one call of the gradient program. Each shape of
  `length_packing.run_shapes` runs once on the run's first update, with nothing to
  do if it has no micro-batch, so every program is compiled then. With
  ``skip_silent`` the rows without a loss term are left out: the gradient and the
  summed metrics are unchanged, since the denominators still count their tokens;
  the fractions (ratio, KL, clip, the sampler gap) are then over the rows that ran
  (``rows_run``; ``silent_rows`` counts the others). With none to run, only the
  optimizer step runs (AdamW's moments and weight decay still move the parameters)
  and the metrics read 0.
  ``fresh_B`` (per row; none by default): the rows whose old log-probs are the
  stop-gradient of this forward, their ``old_logp`` the sampler's, whose gap to
  it is measured (``logp_mismatch_*``).
  ``packed``: the micro-batches are whole sequences packed into rows of ``width``
  (`packed_micro_batches`), one shape per run whatever the lengths, with the same
  gradient and metrics.
  ``skip_nonfinite``: a non-finite step returns the state it was given (`apply_grads`).

  Returns (params, opt_state, the metrics of each call that ran and the step's).
  """
  mesh = policy.mesh
  shards = batch_shards(mesh) if mesh is not None else 1
  budget = micro_batch_budget(micro_batch_tokens)
  lengths_B = np.asarray(batch.attn).sum(axis=1)
  has_tokens_B = np.asarray(batch.resp_mask).sum(axis=1) > 0
  b, t = batch.ids.shape
  silent_B = has_tokens_B & ~loss.has_signal(batch) if skip_silent else np.zeros(b, bool)
  run_B = np.flatnonzero(~silent_B & (has_tokens_B if skip_silent else True))
  if packed:
    plan, bins_M = packed_micro_batches.plan(lengths_B[run_B], width, budget, shards, num_rows=b)
  else:
    plan = length_packing.plan_micro_batches(lengths_B[run_B], t, budget, shards, num_rows=b)
  units_B = loss.units(batch)
  share_M = np.asarray([units_B[run_B[idx]].sum() for idx, _, _ in plan], np.float32)
  share_M /= max(float(share_M.sum()), 1.0)
  scalars = loss.totals(batch)
  fresh_B = np.zeros(b, np.float32) if fresh_B is None else np.asarray(fresh_B, np.float32)
  grad_fn, apply_fn = programs(policy, loss, skip_nonfinite)
  if packed:
    shapes = packed_micro_batches.run_shapes(b, width, t, budget, shards)
  else:
    shapes = length_packing.run_shapes(b, t, budget, shards) if t <= width else []
  shapes += [(-(-b // rows), rows, length) for _, rows, length in plan
             if (-(-b // rows), rows, length) not in shapes]  # rows past the budget: new shapes
  with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
    if mesh is not None:  # a no-op when already placed; restored state may not be
      params = jax.device_put(params, policy.param_sharding)
      opt_state = jax.device_put(opt_state, policy.opt_sharding)
    # On the parameters' placement; without a mesh left uncommitted like them.
    acc = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32,
                                           device=p.sharding if mesh is not None else None),
                       params)
    parts = []
    for slots, rows, length in shapes:
      entries = [m for m, (_, r, l) in enumerate(plan) if (r, l) == (rows, length)]
      compiled = ("shape", loss, slots, rows, length, packed)
      # A shape without micro-batches runs only to compile on the first update, or to
      # give a minibatch with no row to run its (zero) metrics.
      if entries or compiled not in policy.compiled or (not plan and not parts):
        policy.compiled[compiled] = True
        if packed:
          stack = packed_micro_batches.stack(
              (batch, fresh_B), [[run_B[bin_] for bin_ in bins_M[m]] for m in entries],
              rows, length, slots)
        else:
          stack = length_packing.stack_micro_batches((batch, fresh_B),
                                                     [run_B[plan[m][0]] for m in entries],
                                                     rows, length, slots)
        scalars_S = {k: np.full(slots, v, np.float32) for k, v in scalars.items()}
        scalars_S["share"] = np.zeros(slots, np.float32)
        scalars_S["share"][:len(entries)] = share_M[entries]
        if mesh is not None:  # each process hands over only the rows its devices hold
          stack, scalars_S = jax.tree.map(
              lambda v: distributed.to_global(v, batch_sharding(mesh, ndim=v.ndim, row_dim=1)),
              (stack, scalars_S))
        acc, metrics = grad_fn(params, acc, stack, scalars_S, np.int32(len(entries)),
                               update_index)
        if entries or not plan:
          parts.append(metrics)
    params, opt_state, grad_norm, flags_3 = apply_fn(params, opt_state, acc,
                                                     sum(p["loss"].value for p in parts))
  # What the forward computed, padding included (padding / computed: the padding fraction).
  computed = sum(rows * length for _, rows, length in plan)
  parts.append({**kinds.metrics(kinds.MEAN, grad_norm=grad_norm), **finite_guard.flags(flags_3),
                **kinds.metrics(kinds.SUM, silent_rows=np.float32(silent_B.sum()),
                                rows_run=np.float32(has_tokens_B[run_B].sum()),
                                computed_tokens=np.float32(computed),
                                padding_tokens=np.float32(computed - lengths_B[run_B].sum()))})
  return params, opt_state, parts
