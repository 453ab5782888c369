"""The run's placement: which GPUs train, which GPU(s) each model's vLLM server uses, each
one's memory share, and how weights reach the servers; checked twice.

One placement, read from three groups of fields: ``jax_devices`` (the trainer's
GPUs, () = every visible one), ``vllm.gpus.*`` (each server's GPUs) and the
shares, ``xla_mem_fraction`` for the trainer and ``vllm.gpu_memory_utilization``
per server. A GPU's shares add up to at most 1. The trainer's share is the
launcher's to set (``trainer_fraction``; ``setup.start_processes`` writes it to
``XLA_PYTHON_CLIENT_MEM_FRACTION`` before JAX starts): what the servers on its
GPUs leave, less a headroom for the CUDA contexts, so colocating (a memory
share) needs no second number; ``xla_mem_fraction`` overrides it.

`validate` checks the config alone (any machine). `check_start` checks it
against the node before any model loads: the GPU ids exist, every server is
placed, and the resident weights and optimizer states fit each share (the
programs' full memory is `launch/plan.py`'s, which compiles them).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping

from graft_jax.config.checks import ConfigError, policy_configs

# The trainer's share of a GPU no server uses: JAX's own default (0.75) would leave a
# quarter of a dedicated GPU idle; the rest holds the CUDA context and NCCL buffers,
# which live outside JAX's pool.
TRAINER_ALONE_FRACTION = 0.9
# Of a GPU shared with servers, kept out of every pool: the processes' CUDA contexts.
COLOCATED_HEADROOM = 0.05
# Below this share the trainer cannot hold a model's state: a placement that leaves
# less is refused rather than started.
MIN_TRAINER_FRACTION = 0.1


def server_gpus(cfg) -> list[tuple[str, str, tuple[int, ...]]]:
  """``(field, model name, GPU ids)`` of each model's vLLM server, in the run's model order:
  ``vllm.gpus.model_a`` / ``model_b`` for the first two, ``vllm.gpus.more[j]`` after."""
  g, out = cfg.vllm.gpus, []
  for i, model in enumerate(policy_configs(cfg)):
    key = ('model_a', 'model_b')[i] if i < 2 else f'more[{i - 2}]'
    gpus = getattr(g, key) if i < 2 else (g.more[i - 2] if i - 2 < len(g.more) else ())
    out.append((f'vllm.gpus.{key}', model.name, tuple(gpus)))
  return out


def validate(cfg) -> None:
  """Raises `ConfigError` naming the fields of an impossible placement."""
  _check_distributed(cfg.distributed)
  x = cfg.xla_mem_fraction
  if not 0.0 <= x < 1.0:
    raise ConfigError(f'xla_mem_fraction must be in [0, 1) (0: from the placement), got {x}',
                      field='xla_mem_fraction')
  _check_ids('jax_devices', cfg.jax_devices)
  past_pair, more = max(len(policy_configs(cfg)) - 2, 0), len(cfg.vllm.gpus.more)
  if more > past_pair:
    raise ConfigError(f'vllm.gpus.more places the models after the second ({past_pair} in this '
                      f'run), but has {more} entries', field='vllm.gpus.more')
  for field, _, gpus in server_gpus(cfg):
    _check_ids(field, gpus)
  if cfg.engine == 'vllm':
    _check_servers(cfg)


def _check_distributed(d) -> None:
  if d.coordinator_address and d.auto:
    raise ConfigError('distributed.coordinator_address and distributed.auto are two ways to '
                      'start; set one', field='distributed.auto')
  if not d.coordinator_address:
    if d.num_processes or d.process_id != -1:
      raise ConfigError('distributed.num_processes and distributed.process_id need '
                        'distributed.coordinator_address (host:port of process 0)',
                        field='distributed.coordinator_address')
    return
  if ':' not in d.coordinator_address:
    raise ConfigError(f'distributed.coordinator_address must be host:port, got '
                      f'{d.coordinator_address!r}', field='distributed.coordinator_address')
  if d.num_processes < 1 or not 0 <= d.process_id < d.num_processes:
    raise ConfigError(f'distributed.process_id must be in [0, distributed.num_processes), got '
                      f'{d.process_id} of {d.num_processes}', field='distributed.process_id')


def _check_ids(field: str, ids) -> None:
  if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
    raise ConfigError(f'{field} must list distinct GPU ids >= 0, got {tuple(ids)}', field=field)


def _check_servers(cfg) -> None:
  v = cfg.vllm
  placed = {field: gpus for field, _, gpus in server_gpus(cfg) if gpus}
  if v.data_parallel < 1:
    raise ConfigError(f'vllm.data_parallel must be >= 1 (servers per model), got '
                      f'{v.data_parallel}', field='vllm.data_parallel')
  if v.data_parallel > 1 and (cfg.distributed.coordinator_address or cfg.distributed.auto):
    raise ConfigError('vllm.data_parallel > 1 runs under one trainer process; under several, '
                      'use one server per model', field='vllm.data_parallel')
  for field, gpus in placed.items():
    if len(gpus) % v.data_parallel:
      raise ConfigError(f'{field}={gpus} does not split into vllm.data_parallel='
                        f'{v.data_parallel} servers of equal GPU counts',
                        field='vllm.data_parallel')
    size = len(gpus) // v.data_parallel
    if v.tensor_parallel_size not in (1, size):
      raise ConfigError(f'vllm.tensor_parallel_size={v.tensor_parallel_size} disagrees with '
                        f'{field}={gpus}: a placed server runs tensor-parallel over its '
                        f'{size} GPU(s); leave vllm.tensor_parallel_size at 1',
                        field='vllm.tensor_parallel_size')
  if not placed:
    return
  trainer = set(cfg.jax_devices)
  for gpu in sorted({g for gpus in placed.values() for g in gpus}):
    servers = [m for m, gpus in placed.items() if gpu in gpus]
    fields = ' and '.join(f'{m}={placed[m]}' for m in servers)
    used = len(servers) * v.gpu_memory_utilization
    shares_trainer = not trainer or gpu in trainer
    if shares_trainer and not cfg.xla_mem_fraction:
      left = 1.0 - used - COLOCATED_HEADROOM
      if left < MIN_TRAINER_FRACTION:
        where = (f'jax_devices={tuple(cfg.jax_devices)}' if trainer
                 else 'jax_devices=() (the trainer uses every visible GPU)')
        raise ConfigError(
            f'{fields} and {where} share GPU {gpu}, and {len(servers)} x '
            f'vllm.gpu_memory_utilization={v.gpu_memory_utilization} leaves the trainer '
            f'{max(left, 0):.2f} of it: give the trainer other GPUs with jax_devices, or '
            f'lower vllm.gpu_memory_utilization (or set xla_mem_fraction)', field=servers[0])
      continue
    if shares_trainer:
      used += cfg.xla_mem_fraction
    if used > 1.0 + 1e-9:
      share = (f'xla_mem_fraction={cfg.xla_mem_fraction} + ' if shares_trainer else '')
      raise ConfigError(
          f'GPU {gpu} is over-committed: {share}{len(servers)} x '
          f'vllm.gpu_memory_utilization={v.gpu_memory_utilization} = {used:g} > 1 '
          f'({fields})', field='vllm.gpu_memory_utilization')


def _placed_servers(cfg) -> dict[int, int]:
  """{GPU id: vLLM servers on it} (none with the JAX engine)."""
  out: dict[int, int] = {}
  if cfg.engine == 'vllm':
    for _, _, gpus in server_gpus(cfg):
      for g in gpus:
        out[g] = out.get(g, 0) + 1
  return out


def trainer_fraction(cfg) -> float:
  """The trainer's share of each of its GPUs: ``xla_mem_fraction`` when set; else what
  the servers on its most crowded GPU leave less `COLOCATED_HEADROOM`, and
  `TRAINER_ALONE_FRACTION` where it has its GPUs to itself."""
  if cfg.xla_mem_fraction:
    return cfg.xla_mem_fraction
  trainer, placed = set(cfg.jax_devices), _placed_servers(cfg)
  crowd = max((n for g, n in placed.items() if not trainer or g in trainer), default=0)
  if not crowd:
    return TRAINER_ALONE_FRACTION
  left = 1.0 - crowd * cfg.vllm.gpu_memory_utilization - COLOCATED_HEADROOM
  return round(min(left, TRAINER_ALONE_FRACTION), 4)


def sync_backend(cfg, *, on_gpu: bool, processes: int = 1, gpus=None) -> str:
  """The weight sync of the server on ``gpus`` (None: the run's, over every server):
  ``vllm.weight_sync`` unless 'auto'. 'auto' is 'nccl' for a server placed off the GPU
  that sends (process 0's first trainer GPU); 'ipc' for a single process and a one-GPU
  server on that GPU (NCCL cannot join two ranks on one GPU); 'reload' otherwise
  (CPUs, unplaced servers), the path that runs anywhere. Over every server: the one
  choice when all agree, else 'nccl' when every server can take a push (replicas on
  every GPU: the one on the sender's GPU by 'ipc', the rest by 'nccl')."""
  sync = cfg.vllm.weight_sync
  if sync != 'auto':
    return sync
  groups = ([tuple(gpus)] if gpus is not None else
            [g for _, _, placed in server_gpus(cfg)
             for g in (replica_gpus(placed, cfg.vllm.data_parallel) if placed else [()])])
  if cfg.engine != 'vllm' or not on_gpu or not all(groups):
    return 'reload'
  sender = cfg.jax_devices[0] if cfg.jax_devices else 0
  choices = {'nccl' if sender not in g else
             'ipc' if processes == 1 and g == (sender,) else 'reload' for g in groups}
  if len(choices) == 1:
    return choices.pop()
  return 'reload' if 'reload' in choices else 'nccl'


def replica_gpus(gpus, replicas: int) -> list[tuple[int, ...]]:
  """A model's ``vllm.gpus`` split into ``vllm.data_parallel`` servers' GPUs, in order
  (``()``, unplaced, gives ``replicas`` unplaced servers)."""
  gpus = tuple(gpus)
  if not gpus:
    return [()] * replicas
  size = len(gpus) // replicas
  return [gpus[i * size:(i + 1) * size] for i in range(replicas)]


@dataclasses.dataclass(frozen=True)
class Footprint:
  """What must sit on the GPUs before any program runs, per model: its parameter count
  and the bytes per parameter the trainer keeps (master weights + optimizer state)."""
  name: str
  params: int
  trainer_bytes_per_param: int
  serve_bytes_per_param: int


def cuda_visible_list(cvd: str) -> list[str]:
  """The entries of a ``CUDA_VISIBLE_DEVICES`` value (ordinals, UUIDs or MIG ids)."""
  return [d.strip() for d in cvd.split(',') if d.strip()]


def physical_gpus(ids, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
  """What a child process's ``CUDA_VISIBLE_DEVICES`` must list for the config's GPU `ids`.

  Config ids index into the inherited ``CUDA_VISIBLE_DEVICES`` (a job given GPUs 4-7
  calls them 0-3), as CUDA numbers them inside this process and as JAX's
  ``jax_cuda_visible_devices`` reads them; a server started with its own
  ``CUDA_VISIBLE_DEVICES`` needs the inherited entries they stand for. Without one,
  ids are the driver's. `graft_jax.train.preflight` refuses an id past the list.
  """
  cvd = environ.get('CUDA_VISIBLE_DEVICES')
  if cvd is None:
    return tuple(str(i) for i in ids)
  have = cuda_visible_list(cvd)
  return tuple(have[i] for i in ids)


def visible_gpus(environ: Mapping[str, str] = os.environ,
                 proc: pathlib.Path = pathlib.Path('/proc/driver/nvidia/gpus')) -> int | None:
  """GPUs this node shows the run (``CUDA_VISIBLE_DEVICES``, else the NVIDIA driver's
  list); None when neither says (no NVIDIA driver: a CPU run)."""
  cvd = environ.get('CUDA_VISIBLE_DEVICES')
  if cvd is not None:
    return len(cuda_visible_list(cvd))
  return len(list(proc.iterdir())) if proc.is_dir() else None


def check_start(cfg, *, gpus: int | None, device_bytes: int | None,
                footprints: list[Footprint], margin_bytes: int = 4 * 2**30) -> None:
  """Raises `ConfigError` (one line, naming the field and a fix) when the placement does
  not fit this node: `gpus` visible GPUs (None or 0: no GPUs, nothing to place) of
  `device_bytes` each (None: memory unknown, ids checked only)."""
  if not gpus:
    return
  fields = [('jax_devices', tuple(cfg.jax_devices))]
  if cfg.engine == 'vllm':
    fields += [(f, g) for f, _, g in server_gpus(cfg)]
  for field, ids in fields:
    if any(i >= gpus for i in ids):
      raise ConfigError(f'{field}={ids} names GPU {max(ids)}, but this node shows {gpus} '
                        f'GPU(s) (ids 0..{gpus - 1}); place it on those', field=field)
  if cfg.engine == 'vllm':
    for field, name, ids in server_gpus(cfg):
      if not ids:
        raise ConfigError(f'{field} is unset: on GPUs each vLLM server needs its GPUs, or '
                          f'{name}\'s would land on GPU 0 next to the trainer; set e.g. '
                          f'{field}=({gpus - 1},) and jax_devices to the others', field=field)
  if not device_bytes:
    return
  trainer_devices = len(cfg.jax_devices) or gpus
  frac = trainer_fraction(cfg)
  resident = sum(f.params * f.trainer_bytes_per_param for f in footprints)
  per_device = resident // cfg.mesh.state_shards(trainer_devices) + margin_bytes
  if per_device > frac * device_bytes:
    raise ConfigError(
        f'the models\' weights and optimizer states take {per_device / 2**30:.1f} GiB per '
        f'trainer GPU (with a {margin_bytes / 2**30:.0f} GiB margin), more than its share '
        f'{frac:g} x {device_bytes / 2**30:.0f} GiB: give the trainer more GPUs '
        f'(jax_devices, mesh.fsdp) or fewer servers beside it', field='jax_devices')
  if cfg.engine != 'vllm':
    return
  share = cfg.vllm.gpu_memory_utilization * device_bytes
  by_name = {f.name: f for f in footprints}
  for field, name, ids in server_gpus(cfg):
    if name not in by_name:
      continue
    f = by_name[name]
    # Each of the model's vllm.data_parallel servers holds all its weights over its GPUs.
    weights = f.params * f.serve_bytes_per_param * cfg.vllm.data_parallel / max(len(ids), 1)
    if weights >= share:
      raise ConfigError(
          f'{f.name}\'s served weights take {weights / 2**30:.1f} GiB per GPU of {field}={ids}, '
          f'more than vllm.gpu_memory_utilization={cfg.vllm.gpu_memory_utilization} of '
          f'{device_bytes / 2**30:.0f} GiB leaves it: raise it or give the server more GPUs',
          field='vllm.gpu_memory_utilization')
