"""Turning a validated ``TrainConfig`` into a ``Trainer``: load models, tokenizers and problems."""

from __future__ import annotations

import dataclasses
import functools
import logging
import pathlib

import jax.numpy as jnp

from graft_jax import data
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.train.config import check_paths
from graft_jax.train.trainer import Trainer, default_reward
from graft_jax.train.validation import Validator

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


def vllm_engine(cfg, name: str, model, tokenizer):
  """A vLLM sidecar engine for one policy, set up from ``cfg.vllm``; its files go to
  ``<workdir>/vllm/<name>``."""
  from graft_jax.rollout.vllm_engine import VLLMEngine
  from graft_jax.rollout.vllm_sidecar import SidecarOptions

  v = cfg.vllm
  opts = {f.name: getattr(v, f.name) for f in dataclasses.fields(SidecarOptions)
          if hasattr(v, f.name)}
  opts["max_model_len"] = v.max_model_len or cfg.max_prompt_len + cfg.max_response_len
  return VLLMEngine(model, eos_ids=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                    run_dir=pathlib.Path(cfg.workdir, "vllm", name), options=SidecarOptions(**opts),
                    name=name, **vllm_engine_settings(v))


def vllm_engine_settings(v) -> dict:
  """``VLLMEngine``'s recovery and check settings from a ``VllmConfig``."""
  return dict(check_every=v.check_every, probe_tolerance=v.probe_tolerance or None,
              max_restarts=v.max_restarts, request_timeout_s=v.request_timeout_s,
              health_every_s=v.health_every_s, max_concurrency=v.max_concurrency)


def attach_engines(trainer: Trainer, make_engine) -> None:
  """Swaps each policy's JAX sampler for ``make_engine(name, model, tokenizer)``, built
  from the current (possibly restored) weights."""
  for name, p in trainer.policies.items():
    p.engine = make_engine(name, p.model, p.tokenizer)


def ensure_toy_pair_if_named(cfg) -> None:
  """Builds (or reuses) the embedded toy pair when the config names its default folders."""
  from graft_jax import toy
  root = pathlib.Path(toy.DEFAULT_ROOT)
  wanted = {pathlib.Path(m.path) for m in (cfg.model_a, cfg.model_b) if m.path}
  if wanted & {root / "model_a", root / "model_b"} and not all(p.exists() for p in wanted):
    toy.ensure_toy_pair(root)


def build_trainer(cfg, *, reward_fn=None) -> Trainer:
  """Checks paths, then loads everything the run needs (and starts vLLM sidecars if asked).

  A config pointing at the toy pair's folders builds the pair on first use.
  """
  ensure_toy_pair_if_named(cfg)
  check_paths(cfg)
  if reward_fn is None:
    reward_fn = default_reward(cfg)
  problems = load_train_problems(cfg)
  # The suite loads (and fails on a bad file) before the models do.
  validator = Validator.from_config(cfg, reward_fn, problems)
  trainer = Trainer(cfg, problems, load_models(cfg), reward_fn=reward_fn, validator=validator)
  if cfg.engine == "vllm":
    attach_engines(trainer, functools.partial(vllm_engine, cfg))
  return trainer
