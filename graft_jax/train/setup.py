"""Turning a validated ``TrainConfig`` into a ``Trainer``: load models, tokenizers and problems."""

from __future__ import annotations

import json
import logging
import os
import pathlib

import jax
import jax.numpy as jnp

from graft_jax import compile_cache, distributed
from graft_jax.models import kernel_check, load_hf, load_tokenizer
from graft_jax.models.attention import describe_impl
from graft_jax.sharding import (batch_shards, describe_mesh, format_bytes, make_mesh,
                                max_bytes_per_device)
from graft_jax.config.run_config import ConfigError, policy_configs
from graft_jax.train.update import micro_batch_budget
from graft_jax.train import methods, preflight, run_inputs
from graft_jax.config import placement as config_placement
from graft_jax.train.policy import PoolSettings
from graft_jax.train.trainer import Trainer, config_reward, make_reward_pool
from graft_jax.train.validation import Validator

log = logging.getLogger(__name__)


def load_train_problems(cfg):
  """The training problems the config names; dropped rows are counted and logged
  (``graft_jax.train.run_inputs.load_training_problems`` also returns the counts)."""
  return run_inputs.load_training_problems(cfg)[0]


def load_models(cfg, mesh=None) -> dict:
  """{name: (decoder, tokenizer)} for each of the run's models (``policy_configs``), in
  order; a replayed peer is (None, None). With a ``mesh``, each weight is loaded
  straight onto its shards."""
  dtype = jnp.dtype(cfg.param_dtype)
  compute, perf = jnp.dtype(cfg.dtype), cfg.perf
  out = {}
  for m in policy_configs(cfg):
    if not m.path:
      continue
    if not methods.trains(cfg, m):
      out[m.name] = (None, None)  # the peer is its logs
      continue
    model, _ = load_hf(m.path, dtype=dtype, compute_dtype=compute, mesh=mesh)
    model.set_memory_options(remat=perf.remat, scan_layers=perf.scan_layers,
                             attention=perf.attention_impl, attention_block=perf.attention_block,
                             score_tokens=micro_batch_budget(perf.micro_batch_tokens),
                             kv_cache_bytes=perf.sampler_max_kv_bytes)
    model.set_decode_attention(perf.decode_attention)
    logging.info("%s: attention %s", m.name, describe_impl(
        perf.attention_impl, dtype=compute, head_dim=model.cfg.head_dim,
        length=cfg.max_prompt_len + cfg.max_response_len, block=perf.attention_block))
    out[m.name] = (model, load_tokenizer(m.path))
  return out


def start_processes(cfg) -> bool:
  """Applies the trainer's placement (``jax_devices``, its memory share from
  `config_placement.trainer_fraction`) and its compilation cache
  (``perf.compile_cache_dir``), joins the other processes of a multi-process run
  (``graft_jax.distributed``), and checks this node: its GPUs, JAX backend, vLLM
  build, NCCL versions and /dev/shm room (`preflight.check`), the placement against its
  GPUs (`config_placement.check_start`), its kernels (`kernel_check`); call it before
  anything touches a JAX device, the workdir or the data. True for a multi-process run."""
  compile_cache.enable(cfg.perf.compile_cache_dir)
  fraction = str(config_placement.trainer_fraction(cfg))
  before = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
  if before not in (None, fraction):
    log.warning("XLA_PYTHON_CLIENT_MEM_FRACTION=%s replaced by the placement's %s "
                "(set xla_mem_fraction to choose it)", before, fraction)
  os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = fraction
  if cfg.jax_devices:  # CUDA ordinals: indices into the inherited CUDA_VISIBLE_DEVICES
    jax.config.update("jax_cuda_visible_devices", ",".join(map(str, cfg.jax_devices)))
  multi = distributed.initialize(cfg.distributed)
  preflight.check(cfg, preflight.Host.detect(cfg))
  gpus = config_placement.visible_gpus()
  config_placement.check_start(cfg, gpus=gpus, device_bytes=gpu_bytes() if gpus else None,
                               footprints=placement_footprints(cfg))
  kernel_check.check(cfg)  # each custom kernel the run uses, once against XLA's reference
  return multi


def gpu_bytes() -> int | None:
  """One local GPU's memory: JAX's pool (``bytes_limit``) over the share it was given."""
  device = jax.local_devices()[0]
  if device.platform != "gpu":
    return None
  limit = (device.memory_stats() or {}).get("bytes_limit")
  return int(limit / float(os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"])) if limit else None


def placement_footprints(cfg) -> list:
  """`config_placement.Footprint` of each model whose folder has a config.json (the
  others are not checked here)."""
  from graft_jax.models.config import ModelConfig
  from graft_jax.models.size import all_params
  out = []
  for m in policy_configs(cfg):
    path = pathlib.Path(m.path or "", "config.json")
    if not m.path or not path.is_file():
      continue
    mc = ModelConfig.from_hf_config(json.loads(path.read_text()))
    serve = jnp.dtype(cfg.vllm.dtype).itemsize if cfg.vllm.dtype != "auto" else 2
    # master weights + AdamW's two moments, all in param_dtype
    out.append(config_placement.Footprint(m.name, all_params(mc),
                                          3 * jnp.dtype(cfg.param_dtype).itemsize, serve))
  return out


def build_mesh(cfg):
  """The run's device mesh from ``cfg.mesh`` (data x fsdp x tensor), entered with
  ``jax.set_mesh`` for the rest of the process; None on one device. A mesh that
  does not match the devices fails here, before any model loads.

  One device has nothing to place, and the plain update keeps its exact numerics.
  No mesh is entered then either: under one, a program's outputs come back
  committed to it while the loaded weights are not, so the second step's
  arguments would differ from the first's and every program would compile again.
  """
  m = cfg.mesh
  try:
    mesh = make_mesh(m)
  except ValueError as e:
    raise ConfigError(f"mesh (data={m.data}, fsdp={m.fsdp}, tensor={m.tensor}) does not fit "
                      f"the {jax.device_count()} devices: {e}", field="mesh") from None
  log.info("%s", describe_mesh(mesh))
  if mesh.size == 1:
    return None
  pool = PoolSettings.from_config(cfg)
  if pool is not None and pool.slots % batch_shards(mesh):
    raise ConfigError(f"rollout.pool_slots={pool.slots} must be a multiple of the mesh's "
                      f"{batch_shards(mesh)} batch devices, which split the slots",
                      field="rollout.pool_slots")
  jax.set_mesh(mesh)
  return mesh


def log_state_bytes(trainer: Trainer) -> None:
  """One line per policy: the most bytes any device holds of its params and optimizer state."""
  for name, p in trainer.policies.items():
    log.info("%s: params %s + optimizer state %s per device (largest shard set)", name,
             format_bytes(max_bytes_per_device(p.params)),
             format_bytes(max_bytes_per_device(p.opt_state)))


def attach_engines(trainer: Trainer, make_engine) -> None:
  """Swaps each policy's JAX sampler for ``make_engine(name, model, tokenizer)``, built
  from the current (possibly restored) weights."""
  for name, p in trainer.policies.items():
    p.engine = make_engine(name, p.model, p.tokenizer)


def build_trainer(cfg, *, reward_fn=None, build_models=None) -> Trainer:
  """Checks what the run reads and writes, then loads the models (and starts vLLM sidecars
  if asked).

  Before any model loads: the workdir takes a synced write, the training
  problems load (malformed rows stop the run or, with ``data.skip_malformed``,
  are counted), and with ``reward.kind=math_verify`` golds math-verify cannot
  use are quarantined. The trainer owns and closes that reward's verifier pool
  (``reward.num_workers`` processes) and
  the sidecars. ``build_models(cfg)``, when given, makes the model folders a run
  builds on first use (launch/train.py passes the toy pair's); process 0 calls it
  once the inputs are checked, before the paths are. With ``distributed.*`` set it first joins the run's other
  processes (``start_processes``); each then verifies its share of the rewards.
  """
  start_processes(cfg)
  run_inputs.check_workdir(cfg)
  problems, counts = run_inputs.load_training_problems(cfg)
  pool = make_reward_pool(cfg) if reward_fn is None else None
  try:
    if pool is not None:
      problems, quarantined = run_inputs.quarantine_golds(
          problems, pool=pool, timeout_s=cfg.reward.timeout_s, source=run_inputs.source_of(cfg))
      counts.update(quarantined)
    if reward_fn is None:
      reward_fn = config_reward(cfg, pool)
    # Each process verifies its share of a step's responses; all get every reward.
    reward_fn = distributed.shared_reward(reward_fn)
    run_inputs.require_batch(problems, cfg, counts)
    if build_models is not None:
      if distributed.is_writer():  # one process builds; the others wait and read it
        build_models(cfg)
      distributed.sync("build-models")
    methods.check_paths(cfg)
    # The suite loads (and fails on a bad file) before the models do.
    validator = Validator.from_config(cfg, reward_fn, problems)
    mesh = build_mesh(cfg)
    trainer = Trainer(cfg, problems, load_models(cfg, mesh), reward_fn=reward_fn,
                      validator=validator, data_counts=counts, reward_pool=pool, mesh=mesh)
    log_state_bytes(trainer)
  except BaseException:
    if pool is not None:
      pool.close()
    raise
  if cfg.engine == "vllm":
    from graft_jax.rollout.vllm_setup import vllm_engine
    placed = []  # the servers so far: those sharing a GPU start in turn

    def owned_engine(name, model, tokenizer):
      engine = vllm_engine(cfg, name, model, tokenizer, placed)
      trainer.own(engine)
      return engine
    try:
      attach_engines(trainer, owned_engine)
    except BaseException:
      trainer.close()
      raise
  return trainer
