"""Supervised warm-start: next-token training on (prompt, worked solution + EOS) pairs.

The loss is response-only: prompt tokens are context, never targets, so the
model learns to answer a prompt the way the trainer will pose it, and to stop.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from graft_jax.models import init_model, pack_pairs, token_logprobs


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """Optimiser schedule for the warm-start (AdamW, linear warmup, cosine decay)."""

  steps: int = 600
  batch_size: int = 32
  lr: float = 3e-3
  warmup_steps: int = 50
  weight_decay: float = 0.0
  clip_norm: float = 1.0


def init_host(model_cfg, *, seed: int, std: float = 0.02):
  """`init_model`'s distribution (normal(0, std) weights, unit norms) drawn with NumPy.

  Eager `init_model` compiles one program per weight shape and a jitted one
  compiles slowly on CPU; for a toy build both cost more than the training.
  """
  abstract = nnx.eval_shape(lambda: init_model(model_cfg, rngs=nnx.Rngs(0)))
  rng = np.random.default_rng(seed)
  for _, var in nnx.to_flat_state(nnx.state(abstract, nnx.Param)):
    shape, dtype = var.get_value().shape, var.get_value().dtype
    if var.get_metadata().get("logical_axes") == ("norm",):
      value = np.ones(shape, dtype)
    else:
      value = (std * rng.standard_normal(shape)).astype(dtype)
    var.set_value(jnp.asarray(value))
  return abstract


def sft_loss(model, ids_BxT, attn_mask_BxT, loss_mask_BxT):
  """Mean negative log-likelihood of the tokens where `loss_mask_BxT` is True.

  L = -sum_{b,t} m[b,t] log p(ids[b,t] | ids[b,<t]) / sum_{b,t} m[b,t].
  """
  logp_BxT = token_logprobs(model, ids_BxT, attn_mask_BxT)
  mask_BxT = loss_mask_BxT.astype(jnp.float32)
  return -(logp_BxT * mask_BxT).sum() / jnp.maximum(mask_BxT.sum(), 1.0)


def make_optimizer(cfg: SFTConfig) -> optax.GradientTransformation:
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, cfg.lr, max(cfg.warmup_steps, 1), max(cfg.steps, cfg.warmup_steps + 1),
      end_value=cfg.lr * 0.1)
  return optax.chain(optax.clip_by_global_norm(cfg.clip_norm),
                     optax.adamw(schedule, weight_decay=cfg.weight_decay))


def make_train_step(graphdef, tx: optax.GradientTransformation):
  """`step(params, opt_state, ids, attn, loss_mask) -> (params, opt_state, loss)`, jitted,
  with params and optimiser state donated."""

  def step(params, opt_state, ids_BxT, attn_mask_BxT, loss_mask_BxT):
    loss_fn = lambda p: sft_loss(nnx.merge(graphdef, p), ids_BxT, attn_mask_BxT,
                                 loss_mask_BxT)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  return jax.jit(step, donate_argnums=(0, 1))


@dataclasses.dataclass(frozen=True)
class SFTData:
  """Right-padded training rows; `loss_mask_NxT` is True on response tokens (EOS included)."""

  ids_NxT: np.ndarray
  attn_mask_NxT: np.ndarray
  loss_mask_NxT: np.ndarray


def tokenize_pairs(tokenizer, prompts: Sequence[str], responses: Sequence[str],
                   max_len: int) -> SFTData:
  """Tokenizes prompt and response separately (as the trainer and sampler do) and
  appends EOS to the response.

  Rows are padded to the longest, rounded up to a multiple of 8; a pair longer
  than `max_len` raises ValueError.
  """
  prompt_ids = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
  response_ids = [tokenizer.encode(r, add_special_tokens=False) + [tokenizer.eos_token_id]
                  for r in responses]
  longest = max(len(p) + len(r) for p, r in zip(prompt_ids, response_ids))
  if longest > max_len:
    raise ValueError(f"a (prompt, response) pair has {longest} tokens > max_len={max_len}")
  packed = pack_pairs(prompt_ids, response_ids, tokenizer.pad_token_id, multiple=8)
  return SFTData(packed.ids_BxT, packed.attn_mask_BxT, packed.response_mask_BxT)


def train_sft(model, data: SFTData, cfg: SFTConfig, *, seed: int) -> tuple[object, list[float]]:
  """Trains `model` in place of a copy; returns (trained model, per-step losses)."""
  graphdef, params = nnx.split(model)
  tx = make_optimizer(cfg)
  opt_state = tx.init(params)
  step = make_train_step(graphdef, tx)
  rng = np.random.default_rng(seed)
  n = data.ids_NxT.shape[0]
  losses = []
  for _ in range(cfg.steps):
    rows = rng.choice(n, size=cfg.batch_size, replace=n < cfg.batch_size)
    params, opt_state, loss = step(params, opt_state, data.ids_NxT[rows],
                                   data.attn_mask_NxT[rows], data.loss_mask_NxT[rows])
    losses.append(loss)
  return nnx.merge(graphdef, params), [float(x) for x in jax.device_get(losses)]
