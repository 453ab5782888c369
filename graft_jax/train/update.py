"""The compiled PPO minibatch update: one ``jax.jit`` with donated params and optimizer state.

The loss is a pure function of (params, batch) built from ``graft_jax.core``:
the clipped token loss (GRPO, GRAFT, replay), plus the SGT NLL term, or
HACPO's sequence-level loss with its low-variance KL.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from graft_jax import core
from graft_jax.models import token_logprobs


@dataclasses.dataclass(frozen=True)
class PpoLoss:
  """The clipped token loss (GRPO, GRAFT, replay), plus SGT's NLL term when ``sgt_coef``.

  Static: changing a field recompiles the update.
  """

  kind: ClassVar[str] = "ppo"
  clip_low: float = 0.2
  clip_high: float = 0.28
  ratio_level: str = "token"
  sgt_coef: float = 0.0
  temperature: float = 1.0
  # The PPO old log-probs are the stop-gradient of this forward pass (one update
  # per batch of rollouts); ``batch["old_logp"]`` then holds the sampler's.
  old_from_current: bool = False


@dataclasses.dataclass(frozen=True)
class HacpoLoss:
  """HACPO's sequence-level loss with its low-variance KL to the reference (static)."""

  kind: ClassVar[str] = "hacpo"
  # Its rows' old means are read from the rollouts before the update, never from it.
  old_from_current: ClassVar[bool] = False
  temperature: float = 1.0
  self_clip: tuple = (3e-4, 4e-4)
  cross_clip: float = 0.2
  cross_step: float = 0.025
  kl_coef: float = 0.0


_HACPO_FLAT_NAMES = {"hacpo_self_clip": "self_clip", "hacpo_cross_clip": "cross_clip",
                     "hacpo_cross_step": "cross_step"}


def LossSpec(kind: str = "ppo", **fields) -> PpoLoss | HacpoLoss:  # pylint: disable=invalid-name
  """A ``PpoLoss`` or ``HacpoLoss`` from one flat set of fields (``kind`` picks; the HACPO
  clips may be spelled ``hacpo_self_clip`` / ``hacpo_cross_clip`` / ``hacpo_cross_step``)."""
  if kind == "hacpo":
    return HacpoLoss(**{_HACPO_FLAT_NAMES.get(k, k): v for k, v in fields.items()})
  if kind != "ppo":
    raise ValueError(f"loss kind must be 'ppo' or 'hacpo', got {kind!r}")
  return PpoLoss(**fields)


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


def whole_minibatch_mean(mean, count, total):
  """A micro-batch's mean over its ``count`` units, re-divided by the minibatch's
  ``total``: micro-batches' values then add up to the minibatch's mean."""
  return mean * jnp.maximum(count, 1.0) / jnp.maximum(total, 1.0)


def loss_fn(params, batch, graphdef, spec: PpoLoss | HacpoLoss, update_index):
  """Scalar loss and float aux metrics of one minibatch.

  A micro-batch (``graft_jax.train.microbatch``) carries the whole minibatch's
  ``num_tokens`` / ``num_sgt_tokens`` / ``num_rows``; every term is then
  divided by those, so the micro-batches' gradients sum to the minibatch's.
  """
  model = nnx.merge(graphdef, params)
  logp_BxT = token_logprobs(model, batch["ids"], batch["attn"], temperature=spec.temperature)
  if isinstance(spec, HacpoLoss):
    return hacpo_loss(logp_BxT, batch, spec, update_index)
  return ppo_loss(logp_BxT, batch, spec)


def hacpo_loss(logp_BxT, batch, spec: HacpoLoss, update_index):
  """HACPO's policy loss plus ``kl_coef`` times the low-variance KL to the reference."""
  mask_BxT = batch["resp_mask"]
  loss, aux = core.hacpo_policy_loss(
      logp_BxT, mask_BxT, batch["src_mean_logp"], batch["adv"], batch["is_self"],
      batch["cap_ratio"], update_index=update_index,
      self_clip_low=spec.self_clip[0], self_clip_high=spec.self_clip[1],
      cross_clip_delta=spec.cross_clip, cross_clip_step=spec.cross_step)
  kl = core.low_var_kl(logp_BxT, batch["ref_logp"], mask_BxT)
  if "num_rows" in batch:  # a micro-batch: both are means over the minibatch's rows
    loss, kl = (whole_minibatch_mean(x, aux["row_count"], batch["num_rows"]) for x in (loss, kl))
  metrics = {"pg_loss": loss, "kl_ref": kl, **{k: v for k, v in aux.items()}}
  return loss + spec.kl_coef * kl, metrics


def ppo_loss(logp_BxT, batch, spec: PpoLoss):
  """The clipped token loss over the PPO rows, plus the SGT NLL over the SGT rows."""
  mask_BxT = batch["resp_mask"]
  graft_B = batch["grafted"]
  ppo_mask = mask_BxT * batch["ppo"][:, None]
  old_BxT, gap = batch["old_logp"], {}
  if spec.old_from_current:
    old_BxT = jax.lax.stop_gradient(logp_BxT)
    gap = sampler_gap(old_BxT, batch["old_logp"], mask_BxT * (1 - graft_B)[:, None])
  loss, aux = core.clipped_token_loss(
      logp_BxT, old_BxT, batch["adv"], batch["weight"], ppo_mask,
      clip_low=spec.clip_low, clip_high=spec.clip_high, ratio_level=spec.ratio_level,
      num_tokens=batch.get("num_tokens"))
  tokens_B = ppo_mask.sum(axis=1)
  clipped_B = aux["clip_low_count_B"] + aux["clip_high_count_B"]
  metrics = {
      "pg_loss": loss, "approx_kl": aux["approx_kl"], "ratio_mean": aux["ratio_mean"],
      "clip_frac_low": aux["clip_frac_low"], "clip_frac_high": aux["clip_frac_high"],
      "own_tokens": (tokens_B * (1 - graft_B)).sum(), "graft_tokens": (tokens_B * graft_B).sum(),
      "own_clipped": (clipped_B * (1 - graft_B)).sum(), "graft_clipped": (clipped_B * graft_B).sum(),
      **gap,
  }
  if spec.sgt_coef:
    nll, count = core.sgt_nll(logp_BxT, mask_BxT, batch["sgt"], coef=spec.sgt_coef)
    if "num_sgt_tokens" in batch:
      nll = whole_minibatch_mean(nll, count, batch["num_sgt_tokens"])
    metrics.update(sgt_loss=nll, sgt_tokens=count)
    loss = loss + nll
  return loss, metrics


def sampler_gap(old_logp_BxT, sampler_logp_BxT, own_BxT) -> dict:
  """|old-policy - sampler| log-prob over the own response tokens: the mean and the max,
  and the sum and count the mean is pooled from over micro-batches
  (`microbatch.combine_metric`; maxima combine by maximum)."""
  gap_BxT = jnp.abs(old_logp_BxT - sampler_logp_BxT) * own_BxT
  total, count = gap_BxT.sum(), own_BxT.sum()
  return {"logp_mismatch_mean": total / jnp.maximum(count, 1.0), "logp_mismatch_sum": total,
          "logp_mismatch_tokens": count, "logp_mismatch_max": gap_BxT.max()}


@functools.partial(jax.jit, static_argnames=("graphdef", "tx", "spec"), donate_argnums=(0, 1))
def update_minibatch(params, opt_state, batch, update_index, *, graphdef, tx, spec):
  """One optimizer step on one minibatch; params and opt_state are donated."""
  (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      params, batch, graphdef, spec, update_index)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  metrics = dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads))
  return params, opt_state, metrics


def to_device_batch(batch: dict, mesh=None) -> dict:
  """Host arrays to device; with a mesh, rows are split over the batch axes."""
  if mesh is None:  # device_put, not jnp.asarray: that compiles a program per new shape
    return jax.device_put(batch)
  from graft_jax.sharding import batch_sharding
  return {k: jax.device_put(v, batch_sharding(mesh, ndim=np.ndim(v))) for k, v in batch.items()}
