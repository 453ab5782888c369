"""Turning a validated ``TrainConfig`` into a ``Trainer``: load models, tokenizers and problems."""

from __future__ import annotations

import logging

import jax.numpy as jnp

from graft_jax import data
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.train.config import check_paths
from graft_jax.train.trainer import Trainer

log = logging.getLogger(__name__)


def load_train_problems(cfg):
  """The training problems the config names; dropped rows are counted and logged."""
  if cfg.data.format == "synthetic":
    s = cfg.data.synthetic
    return data.make_synthetic(list(s.families), s.num, seed=s.seed, difficulty=s.difficulty)
  problems, stats = data.load_problems(cfg.data.train_path)
  log.info("loaded %s: %s", cfg.data.train_path, stats)
  return problems


def load_models(cfg) -> dict:
  """{name: (decoder, tokenizer)} for model_a, and model_b where the method uses it."""
  dtype = jnp.dtype(cfg.param_dtype)
  compute = jnp.dtype(cfg.dtype)
  out = {}
  for m in (cfg.model_a, cfg.model_b):
    if not m.path:
      continue
    if cfg.method == "replay" and m is cfg.model_b:
      out[m.name] = (None, None)  # the peer is its logs
      continue
    model, _ = load_hf(m.path, dtype=dtype, compute_dtype=compute)
    out[m.name] = (model, load_tokenizer(m.path))
  return out


def build_trainer(cfg, *, reward_fn=None) -> Trainer:
  """Checks paths, then loads everything the run needs."""
  check_paths(cfg)
  return Trainer(cfg, load_train_problems(cfg), load_models(cfg), reward_fn=reward_fn)
