"""The memory plan of a run config (a pair or ``models`` of any length): each model's update
and JAX sampler on the config's mesh, whether they fit in the trainer's share of a device
next to the other models' resident states and a stated workspace margin, and (with vLLM)
each server's share, weights and KV-cache budget.

Sampling holds, beside every model's state, the sampler's KV cache for one call at its
final size (allocated once per call) and the weights it decodes from: one copy in the
compute dtype, whole on every device (`graft_jax.rollout.decode_weights`). The margin
covers what no compiled program reports: the CUDA context, cuBLAS / cuDNN workspaces,
NCCL buffers and allocator fragmentation.
"""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp

from graft_jax.backends import live_decode_granule
from graft_jax.models.config import ModelConfig
from graft_jax.plan.memory import abstract_model, largest_rows, update_memory
from graft_jax.rollout.kv_budget import (KVBudgetError, bucket, call_plan, kv_bytes_per_prompt,
                                        pool_cache_bytes, pool_window)
from graft_jax.rollout.continuous import DEFAULT_SHRINKS
from graft_jax.sharding.mesh import make_mesh
from graft_jax.sharding.place import batch_shards
from graft_jax.sharding.report import format_bytes
from graft_jax.config.checks import policy_configs
from graft_jax.config import placement as config_placement
from graft_jax.config.placement import server_gpus

# The paper's models by their config names, for folders not on this machine.
PRESETS = {"qwen3_1p7b": ModelConfig.qwen3_1p7b, "smollm3_3b": ModelConfig.smollm3_3b,
           "octothinker_3b": ModelConfig.llama3p2_3b}


def model_config(model) -> ModelConfig:
  """From the model folder's config.json when present, else the preset of its name."""
  path = pathlib.Path(model.path, "config.json")
  if model.path and path.exists():
    return ModelConfig.from_hf_config(json.loads(path.read_text()))
  if model.name not in PRESETS:
    raise ValueError(f"{model.name}: no {path} and no preset (known: {sorted(PRESETS)})")
  return PRESETS[model.name]()


# Per device, for what no program's memory analysis holds (see the module docstring).
WORKSPACE_MARGIN_BYTES = 4 * 2**30


def trainer_fraction(cfg) -> float:
  """The share of each device the trainer's JAX process may use, as the launcher sets it
  (`config_placement.trainer_fraction`)."""
  return config_placement.trainer_fraction(cfg)


def trainer_devices(cfg, gpus: int) -> int:
  """How many of a node's `gpus` the trainer's mesh spans: ``jax_devices``, else all."""
  return len(cfg.jax_devices) or gpus


def placement(cfg, gpus: int, device_bytes: int, table, servers,
              margin_bytes: int = WORKSPACE_MARGIN_BYTES) -> list[dict]:
  """Per GPU of a `gpus`-GPU node: who holds which share (the trainer, each vLLM server),
  the bytes the plan puts there (the trainer: its largest phase of `table` + the
  margin; a server: its weights, the rest its KV cache), the total share, and whether
  it fits (shares at most 1, each need within its share)."""
  trainer = set(cfg.jax_devices) or set(range(gpus))
  need = max((max(r["update"], r["sampling"]) for r in table), default=0) + margin_bytes
  frac = trainer_fraction(cfg)
  rows = []
  for gpu in range(gpus):
    users = []
    if gpu in trainer:
      users.append(dict(who="trainer", fraction=frac, share=int(frac * device_bytes),
                        need=need))
    for s in servers:
      if gpu in s["gpus"]:
        f = cfg.vllm.gpu_memory_utilization
        users.append(dict(who=f"vLLM {s['name']}", fraction=f, share=int(f * device_bytes),
                          need=s["weights"] * s.get("servers", 1) // max(len(s["gpus"]), 1)))
    total = sum(u["fraction"] for u in users)
    rows.append(dict(gpu=gpu, users=users, fraction=total,
                     fits=total <= 1 + 1e-9 and all(u["need"] <= u["share"] for u in users)))
  return rows


def format_placement(rows, device_bytes: int, sync: str) -> str:
  lines = [f"placement on {len(rows)} GPUs of {format_bytes(device_bytes)} "
           f"(weight sync: {sync}; trainer: its largest phase + margin, vLLM: its weights)"]
  for r in rows:
    who = "; ".join(f"{u['who']} {u['fraction']:.2f} = {format_bytes(u['share'])} "
                    f"(needs {format_bytes(u['need'])})" for u in r["users"]) or "unused"
    lines.append(f"GPU {r['gpu']}: {who}; total {r['fraction']:.2f}"
                 f"{'' if r['fits'] else '  DOES NOT FIT'}")
  return "\n".join(lines)


def num_params(model_cfg) -> int:
  """Parameters of the model (tied embeddings once), from abstract shapes."""
  _, params = abstract_model(model_cfg, param_dtype=jnp.float32, dtype=jnp.float32,
                             remat="none", scan_layers=False)
  return sum(int(x.size) for x in jax.tree.leaves(params))


def server_budgets(cfg, device_bytes: int) -> list[dict]:
  """With ``engine=vllm``, per model: its servers' GPUs, and per server (of
  ``vllm.data_parallel``) its memory (``vllm.gpu_memory_utilization`` of each of its
  GPUs), its weights in the serving dtype, and what is left for the KV cache."""
  if cfg.engine != "vllm":
    return []
  v, out = cfg.vllm, []
  for model, (_, _, gpus) in zip(policy_configs(cfg), server_gpus(cfg)):
    per_server = len(gpus) // v.data_parallel if gpus else v.tensor_parallel_size
    share = int(v.gpu_memory_utilization * device_bytes * per_server)
    weights = num_params(model_config(model)) * jnp.dtype(v.dtype).itemsize
    out.append(dict(name=model.name, gpus=gpus, share=share, weights=weights,
                    servers=v.data_parallel, kv=share - weights, fits=weights < share))
  return out


def format_servers(servers) -> str:
  def one(s):
    many = f" ({s['servers']} servers)" if s.get("servers", 1) > 1 else ""
    return (f"vLLM server {s['name']} on GPUs {s['gpus'] or '(every visible)'}{many}: each "
            f"{format_bytes(s['share'])} (vllm.gpu_memory_utilization), weights "
            f"{format_bytes(s['weights'])}, KV cache {format_bytes(max(s['kv'], 0))}"
            f"{'' if s['fits'] else '  NO ROOM'}")
  return "\n".join(one(s) for s in servers)


def sampler_kv_bytes(cfg, model_cfg, row_shards: int = 1) -> tuple[int, bool]:
  """(KV bytes of one JAX-sampler call of a step's rollouts under
  ``perf.sampler_max_kv_bytes``, whether one prompt fits that budget at all); 0 with the
  vLLM engine, whose share ``--reserve-fraction`` keeps free. Per device: the sampler
  splits its rows, and so its cache, over the mesh's batch axes (``kv_budget.call_plan``)."""
  if cfg.engine != "jax":
    return 0, True
  if cfg.rollout.sampler == "pool":
    return pool_kv_bytes(cfg, model_cfg, row_shards), True
  slots = bucket(cfg.max_prompt_len, 16) + bucket(cfg.max_response_len, 16)
  per_prompt = kv_bytes_per_prompt(model_cfg, n=cfg.n, slots=slots,
                                   itemsize=jnp.dtype(cfg.dtype).itemsize)
  try:
    _, chunk = call_plan(cfg.prompts_per_step, per_prompt, cfg.perf.sampler_max_kv_bytes,
                         row_shards=row_shards)
    return chunk // row_shards * per_prompt, True
  except KVBudgetError:
    return per_prompt, False  # the sampler would refuse the run


def pool_kv_bytes(cfg, model_cfg, row_shards: int = 1) -> int:
  """Peak KV bytes per device of the slot pool (``rollout.sampler='pool'``): its
  ``pool_slots`` split over the mesh's batch devices, each row a window of the run's
  longest prompt bucket plus the response bucket (a step's calls hold at most this),
  and, as the pool shrinks, the half-size cache gathered beside the full one
  (`kv_budget.pool_cache_bytes`)."""
  window = pool_window(cfg.max_prompt_len, cfg.max_response_len,
                       chunk=cfg.rollout.pool_prefill_chunk, granule=live_decode_granule())
  return pool_cache_bytes(model_cfg, slots=-(-cfg.rollout.pool_slots // row_shards),
                          window=window, itemsize=jnp.dtype(cfg.dtype).itemsize,
                          shrinks=DEFAULT_SHRINKS)


def decode_weight_bytes(cfg, model_cfg) -> int:
  """The JAX sampler's copy of the weights in the compute dtype (0 with vLLM)."""
  if cfg.engine != "jax":
    return 0
  return num_params(model_cfg) * jnp.dtype(cfg.dtype).itemsize


def plan(cfg, devices, device_bytes: int, *, reserve_fraction: float = 0.0,
         platform: str = "gpu", margin_bytes: int = WORKSPACE_MARGIN_BYTES):
  """Rows of (name, UpdateMemory, largest rows per device, sampler bytes) for each model
  of ``cfg``, its programs traced for ``platform``; every policy lives on the same
  devices, so their fixed states add up, and the sampler's KV cache and bf16 weights
  sit next to them while it decodes."""
  from graft_jax.train import methods  # pylint: disable=import-outside-toplevel
  from graft_jax.train.update import make_optimizer  # pylint: disable=import-outside-toplevel
  mesh = make_mesh(cfg.mesh, devices)
  length, perf = cfg.max_prompt_len + cfg.max_response_len, cfg.perf
  rows_cfg = max(1, perf.micro_batch_tokens // length) if perf.micro_batch_tokens else None
  minibatch_rows = cfg.prompts_per_step // cfg.num_minibatches * cfg.n
  tx, loss = make_optimizer(cfg.optimizer), methods.make(cfg).loss_fn
  kw = dict(length=length, minibatch_rows=minibatch_rows, param_dtype=jnp.dtype(cfg.param_dtype),
            dtype=jnp.dtype(cfg.dtype), remat=perf.remat, scan_layers=perf.scan_layers,
            attention=perf.attention_impl, attention_block=perf.attention_block, platform=platform,
            packed=perf.packed_update)
  out = []
  for model in policy_configs(cfg):
    mc = model_config(model)
    mems = {r: update_memory(mc, mesh, tx, loss, rows_per_device=r, **kw)
            for r in sorted({1, 2, rows_cfg or 1})}
    kv, kv_ok = sampler_kv_bytes(cfg, mc, batch_shards(mesh))
    out.append((model.name, mems, rows_cfg or minibatch_rows,
                (kv + decode_weight_bytes(cfg, mc), kv_ok)))
  fixed = sum(mems[1].params + mems[1].opt_state for _, mems, _, _ in out)
  available = int(device_bytes * min(trainer_fraction(cfg), 1 - reserve_fraction)) - margin_bytes
  table = []
  for name, mems, rows, (kv, kv_ok) in out:
    other = fixed - (mems[1].params + mems[1].opt_state)  # the peers' states stay resident
    mem = mems.get(rows, mems[1])
    most = largest_rows(mems[1], mems[2], available - other)
    update, sampling = mem.total + other, fixed + kv
    table.append(dict(name=name, mem=mem, rows=rows, peer_state=other, kv=kv, update=update,
                      sampling=sampling, fits=kv_ok and max(update, sampling) <= available,
                      largest_rows=most))
  return mesh, available, table


def format_plan(mesh, available, table, length: int,
                margin_bytes: int = WORKSPACE_MARGIN_BYTES) -> str:
  head = (f"{'model':<16}{'params':>11}{'optimizer':>11}{'grads*':>11}{'temps':>11}"
          f"{'peers state':>12}{'update':>11}{'sampler':>12}{'sampling':>11}  fit   "
          f"rows/dev  (largest)")
  lines = [f"{dict(mesh.shape)} x {mesh.devices.size} devices, {format_bytes(available)} "
           f"per device to the trainer (its share from the placement, less a "
           f"{format_bytes(margin_bytes)} workspace margin), "
           f"micro-batch rows of {length} tokens", head]
  for r in table:
    m = r["mem"]
    lines.append(f"{r['name']:<16}{format_bytes(m.params):>11}{format_bytes(m.opt_state):>11}"
                 f"{format_bytes(m.grads):>11}{format_bytes(m.temporaries):>11}"
                 f"{format_bytes(r['peer_state']):>12}{format_bytes(r['update']):>11}"
                 f"{format_bytes(r['kv']):>12}{format_bytes(r['sampling']):>11}  "
                 f"{'yes' if r['fits'] else 'NO ':<5} {r['rows']:>8}  ({r['largest_rows']})")
  lines.append("* grads: the fp32 accumulator, an argument of the gradient program. update: "
               "the larger of the gradient program (+ optimizer state) and the optimizer step, "
               "+ the other models' states; sampler: the JAX sampler's KV cache for one call "
               "(the slot pool's at its peak, as it shrinks) + its weights in the compute "
               "dtype (0 with vLLM); sampling: every model's state + the sampler")
  return "\n".join(lines)
