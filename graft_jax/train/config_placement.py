"""Checks of where a run's processes and vLLM servers go: the distributed start-up and GPU placement.

A vLLM server and the trainer may share a GPU only with an explicit memory
split: ``xla_mem_fraction`` for the trainer (``XLA_PYTHON_CLIENT_MEM_FRACTION``)
plus ``vllm.gpu_memory_utilization`` for every server on that GPU, adding up
to at most 1. Without ``vllm.gpus`` the servers see every device, as before.
"""

from __future__ import annotations

from graft_jax.train.config_checks import ConfigError, policy_configs


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
    raise ConfigError(f'xla_mem_fraction must be in [0, 1) (0: JAX\'s default), got {x}',
                      field='xla_mem_fraction')
  _check_ids('jax_devices', cfg.jax_devices)
  if not cfg.vllm.host:
    raise ConfigError("vllm.host must be an address to bind, e.g. '127.0.0.1'",
                      field='vllm.host')
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
  for field, gpus in placed.items():
    if v.tensor_parallel_size not in (1, len(gpus)):
      raise ConfigError(f'vllm.tensor_parallel_size={v.tensor_parallel_size} disagrees with '
                        f'{field}={gpus}: a placed server runs tensor-parallel over its '
                        f'{len(gpus)} GPU(s); leave vllm.tensor_parallel_size at 1',
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
      where = (f'jax_devices={tuple(cfg.jax_devices)}' if trainer
               else 'jax_devices=() (the trainer uses every visible GPU)')
      raise ConfigError(
          f'{fields} and {where} put a vLLM server and the trainer on GPU {gpu} without a '
          f'memory split: give the trainer other GPUs with jax_devices, or set '
          f'xla_mem_fraction so that it plus vllm.gpu_memory_utilization per server '
          f'({v.gpu_memory_utilization}) is at most 1', field=servers[0])
    if shares_trainer:
      used += cfg.xla_mem_fraction
    if used > 1.0 + 1e-9:
      share = (f'xla_mem_fraction={cfg.xla_mem_fraction} + ' if shares_trainer else '')
      raise ConfigError(
          f'GPU {gpu} is over-committed: {share}{len(servers)} x '
          f'vllm.gpu_memory_utilization={v.gpu_memory_utilization} = {used:g} > 1 '
          f'({fields})', field='vllm.gpu_memory_utilization')
