"""Validation of a `TrainConfig`: one-line errors that name the field.

`validate` runs before anything loads; `check_paths` is the launch-time check
of files and folders the run will open or write.
"""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
import re
from typing import Any, Iterable, Mapping, Sequence

from graft_jax.config.load import flatten
from graft_jax.config.errors import MOVED, ConfigError, PathError, did_you_mean
from graft_jax.rewards import select as reward_select
from graft_jax.sharding.mesh import MeshAxisError

# `method` is the registry's (graft_jax.train.methods), checked where a run loads its config.
_ENUMS = {
    'engine': ('jax', 'vllm'),
    'dtype': ('bfloat16', 'float32', 'float16'),
    'param_dtype': ('float32', 'bfloat16'),
    'old_logp_source': ('teacher_forced', 'sampler'),
    'data.source': ('file', 'synthetic'),
    'data.too_long': ('skip', 'error'),
    'optimizer.schedule': ('constant',),
    'graft.order': ('peer_last', 'peer_first', 'uniform'),
    'graft.advantages': ('source', 'pooled'),
    'graft.transfer': ('full', 'success_only'),
    'graft.gate': ('on', 'off'),
    'graft.ratio_level': ('token', 'sequence'),
    'sgt.prompts': ('own_failures', 'graft_selected'),
    'hacpo.prompts': ('all', 'graft_selected'),
    'vllm.dtype': ('bfloat16', 'float16', 'float32', 'auto'),
    'vllm.weight_sync': ('auto', 'reload', 'nccl', 'ipc'),
    'rollout.concurrent': ('auto', 'on', 'off'),
    'rollout.sampler': ('static', 'pool'),
    'checkpoint.export_dtype': ('stored', 'bfloat16', 'float32', 'float16'),
    'logging.wandb_mode': ('online', 'offline'),
}
# Model names become file and folder names of the peer logs.
_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*$')


def _get(cfg: Any, field: str) -> Any:
  for part in field.split('.'):
    cfg = getattr(cfg, part)
  return cfg


def _fmt(x: float) -> str:
  return f'{x:g}' if isinstance(x, float) else str(x)


def check_choice(field: str, value: Any, allowed: Sequence[str]) -> None:
  """Raises unless ``value`` is one of ``allowed``, suggesting the closest."""
  if value not in allowed:
    raise ConfigError(f'{field} must be one of {", ".join(allowed)}, '
                      f'got {value!r}{did_you_mean(str(value), allowed)}', field=field)


def _check_range(cfg, field, **bounds):
  check_range(field, _get(cfg, field), **bounds)


def check_range(field: str, x: float, lo=None, hi=None, lo_open=False, hi_open=False) -> None:
  """Raises unless lo <= x <= hi (strict where *_open)."""
  bad = not math.isfinite(x)
  if lo is not None:
    bad |= x <= lo if lo_open else x < lo
  if hi is not None:
    bad |= x >= hi if hi_open else x > hi
  if not bad:
    return
  if lo is not None and hi is not None:
    want = (f'in {"(" if lo_open else "["}{_fmt(lo)}, {_fmt(hi)}'
            f'{")" if hi_open else "]"}')
  elif lo is not None:
    want = f'{">" if lo_open else ">="} {_fmt(lo)}'
  else:
    want = f'{"<" if hi_open else "<="} {_fmt(hi)}'
  raise ConfigError(f'{field} must be {want}, got {_fmt(x)}', field=field)


def policy_configs(cfg: Any) -> tuple:
  """The run's models in order: ``cfg.models``, or the pair ``(model_a, model_b)``."""
  return tuple(cfg.models) or (cfg.model_a, cfg.model_b)


def policy_fields(cfg: Any) -> list[tuple[str, Any]]:
  """``(field, PolicyConfig)`` of every model, named as the config sets them
  (``models[0]``, ... or ``model_a``, ``model_b``)."""
  if cfg.models:
    return [(f'models[{i}]', m) for i, m in enumerate(cfg.models)]
  return [('model_a', cfg.model_a), ('model_b', cfg.model_b)]


def validate(cfg: Any) -> None:
  """Raises `ConfigError` on the first impossible value or combination."""
  for field, allowed in _ENUMS.items():
    check_choice(field, _get(cfg, field), allowed)
  _check_perf(cfg)
  _check_models(cfg)
  _check_batching(cfg)
  _check_optimization(cfg)
  _check_methods(cfg)
  _check_io(cfg)


def _check_models(cfg) -> None:
  if cfg.models:
    _check_model_list(cfg)
  fields = policy_fields(cfg)
  for field, m in fields:
    if not _NAME_RE.match(m.name):
      raise ConfigError(f'{field}.name must be a file-safe name '
                        f'([A-Za-z0-9._-], not starting with . or -), '
                        f'got {m.name!r}', field=f'{field}.name')
  seen: dict[str, str] = {}
  for field, m in fields:
    if m.name in seen:
      raise ConfigError(f'{seen[m.name]}.name and {field}.name must differ (they key '
                        f'logs and metrics), both are {m.name!r}', field=f'{field}.name')
    seen[m.name] = field


def _check_model_list(cfg) -> None:
  """``models`` replaces the pair fields; methods defined for a pair refuse more than two."""
  k = len(cfg.models)
  if k < 2:
    raise ConfigError(f'models must list at least 2 models, got {k}; leave it empty to use '
                      f'model_a and model_b', field='models')
  set_pair = [f for f in ('model_a', 'model_b') if _get(cfg, f) != type(_get(cfg, f))(name=f)]
  if set_pair:
    raise ConfigError(f'models and {set_pair[0]} are both set; list every model in models and '
                      f'leave model_a / model_b at their defaults', field='models')


def _check_batching(cfg) -> None:
  _check_range(cfg, 'n', lo=2)
  _check_range(cfg, 'prompts_per_step', lo=1)
  _check_range(cfg, 'num_minibatches', lo=1)
  if cfg.prompts_per_step % cfg.num_minibatches:
    raise ConfigError(
        f'num_minibatches ({cfg.num_minibatches}) must divide '
        f'prompts_per_step ({cfg.prompts_per_step})')
  _check_range(cfg, 'ppo_epochs', lo=1)
  _check_range(cfg, 'total_steps', lo=0)
  _check_range(cfg, 'epochs', lo=1)
  _check_range(cfg, 'max_prompt_len', lo=1)
  _check_range(cfg, 'max_response_len', lo=1)
  _check_range(cfg, 'rollout.temperature', lo=0)
  _check_range(cfg, 'rollout.top_p', lo=0, hi=1, lo_open=True)
  _check_range(cfg, 'rollout.top_k', lo=0)
  _check_range(cfg, 'rollout.pool_slots', lo=1)
  _check_range(cfg, 'rollout.pool_prefill_chunk', lo=1)
  _check_range(cfg, 'rollout.pool_prefill_group', lo=1)
  _check_range(cfg, 'rollout.pool_refill_at', lo=0)
  try:
    cfg.mesh.check()
  except MeshAxisError as e:
    raise ConfigError(str(e), field=f'mesh.{e.axis}' if e.axis else 'mesh') from None
  if cfg.data.source == 'synthetic':
    if not cfg.data.synthetic.families:
      raise ConfigError('data.synthetic.families must not be empty')
    _check_range(cfg, 'data.synthetic.num', lo=1)
    _check_range(cfg, 'data.synthetic.difficulty', lo=0)


def _check_optimization(cfg) -> None:
  _check_range(cfg, 'optimizer.lr', lo=0, lo_open=True)
  _check_range(cfg, 'optimizer.warmup_steps', lo=0)
  _check_range(cfg, 'optimizer.b1', lo=0, hi=1, hi_open=True)
  _check_range(cfg, 'optimizer.b2', lo=0, hi=1, hi_open=True)
  _check_range(cfg, 'optimizer.eps', lo=0, lo_open=True)
  _check_range(cfg, 'optimizer.weight_decay', lo=0)
  _check_range(cfg, 'optimizer.grad_clip', lo=0)
  _check_range(cfg, 'clip_low', lo=0, hi=1, hi_open=True)
  _check_range(cfg, 'clip_high', lo=0)


def _check_methods(cfg) -> None:
  _check_range(cfg, 'graft.delta', lo=0, hi=1, hi_open=True)
  h = cfg.hacpo
  _check_range(cfg, 'hacpo.capability_window', lo=1)
  lo, hi = h.ratio_clamp
  if not (math.isfinite(hi) and 0 < lo <= 1 <= hi):
    raise ConfigError(f'hacpo.ratio_clamp must satisfy 0 < low <= 1 <= high, '
                      f'got {h.ratio_clamp}')
  if not all(0 <= c < 1 for c in h.self_clip):
    raise ConfigError(f'hacpo.self_clip entries must be in [0, 1), '
                      f'got {h.self_clip}')
  _check_range(cfg, 'hacpo.cross_clip', lo=0, hi=1)
  _check_range(cfg, 'hacpo.cross_clip_step', lo=0)
  _check_range(cfg, 'hacpo.kl_coef', lo=0)
  _check_range(cfg, 'hacpo.minibatch_prompts', lo=1)
  _check_range(cfg, 'sgt.coef', lo=0)


def _check_io(cfg) -> None:
  problem = reward_select.kind_problem(cfg.reward.kind)
  if problem:
    raise ConfigError(f'reward.kind {problem}', field='reward.kind')
  _check_range(cfg, 'reward.timeout_s', lo=0, lo_open=True)
  _check_range(cfg, 'reward.num_workers', lo=1)
  _check_range(cfg, 'reward.success_threshold', lo=0)
  _check_range(cfg, 'eval.every_steps', lo=0)
  _check_range(cfg, 'eval.temperature', lo=0)
  _check_range(cfg, 'eval.top_p', lo=0, hi=1, lo_open=True)
  _check_range(cfg, 'eval.k', lo=1)
  _check_range(cfg, 'eval.max_examples', lo=0)
  if cfg.eval.every_steps and not cfg.eval.suite:
    raise ConfigError('eval.suite is empty; name a benchmark or set eval.every_steps=0')
  _check_range(cfg, 'checkpoint.every_steps', lo=0)
  _check_range(cfg, 'checkpoint.keep', lo=1)
  v = cfg.vllm
  _check_range(cfg, 'vllm.gpu_memory_utilization', lo=0, hi=1, lo_open=True)
  _check_range(cfg, 'vllm.tensor_parallel_size', lo=1)
  _check_range(cfg, 'vllm.startup_timeout_s', lo=0, lo_open=True)
  _check_range(cfg, 'vllm.check_every', lo=0)
  _check_range(cfg, 'vllm.probe_tolerance', lo=0)
  _check_range(cfg, 'vllm.max_restarts', lo=0)
  _check_range(cfg, 'vllm.request_timeout_s', lo=0, lo_open=True)
  _check_range(cfg, 'vllm.health_every_s', lo=0, lo_open=True)
  _check_range(cfg, 'vllm.sync_timeout_s', lo=0, lo_open=True)
  _check_range(cfg, 'vllm.max_concurrency', lo=0)
  need = cfg.max_prompt_len + cfg.max_response_len
  if cfg.engine == 'vllm' and 0 < v.max_model_len < need:
    raise ConfigError(
        f'vllm.max_model_len ({v.max_model_len}) must be 0 or >= '
        f'max_prompt_len + max_response_len ({need})')
  _check_range(cfg, 'vllm.max_model_len', lo=0)
  _check_weight_sync(v.weight_sync)
  if cfg.logging.wandb and importlib.util.find_spec('wandb') is None:
    raise ConfigError("logging.wandb=true needs the wandb package: pip install -e '.[wandb]'",
                      field='logging.wandb')


# Performance and memory (cfg.perf): its own values are `PerfConfig.check`'s; what
# a setting needs of the rest of the config is checked here.
def _check_perf(cfg) -> None:
  cfg.perf.check()
  _check_decode_kernel(cfg)


def _check_decode_kernel(cfg) -> None:
  """perf.decode_attention='kernel' asks for the CPU kernel: it needs f32 compute and a
  host that can build it (the build itself runs at the sampler's first trace)."""
  if cfg.perf.decode_attention != 'kernel' or cfg.engine != 'jax':
    return
  if cfg.dtype != 'float32':
    raise ConfigError(f"perf.decode_attention='kernel' takes dtype=float32 (the CPU kernel "
                      f"is f32 only), got dtype={cfg.dtype!r}; 'auto' uses it where it applies",
                      field='perf.decode_attention')
  from graft_jax.backends.cpu import decode_kernel  # pylint: disable=import-outside-toplevel
  reason = decode_kernel.host_reason()
  if reason is not None:
    raise ConfigError(f"perf.decode_attention='kernel', but the CPU decode kernel {reason}; "
                      f"'auto' falls back to XLA's", field='perf.decode_attention')


_CUDA_PLUGINS = ('jax_cuda12_plugin', 'jax_cuda13_plugin')


def _check_weight_sync(sync: str, environ: Mapping[str, str] = os.environ) -> None:
  """'nccl' and 'ipc' move weights between CUDA devices, so they need JAX's CUDA
  plugin and no JAX_PLATFORMS that leaves CUDA out. Checked without starting a JAX
  backend (multi-host runs must call jax.distributed.initialize first); a push from a
  non-CUDA buffer still fails at run time, naming the field too."""
  if sync not in ('nccl', 'ipc'):
    return
  platforms = environ.get('JAX_PLATFORMS', '')
  if platforms and not {'cuda', 'gpu'} & set(platforms.split(',')):
    why = f'JAX_PLATFORMS={platforms}'
  elif not any(importlib.util.find_spec(m) for m in _CUDA_PLUGINS):
    why = "JAX has no CUDA plugin here (pip install 'jax[cuda12]')"
  else:
    return
  raise ConfigError(f"vllm.weight_sync={sync!r} needs the trainer on CUDA GPUs ({why}); "
                    f"use vllm.weight_sync='reload'", field='vllm.weight_sync')


# Fields a resumed run may not change: they define the models, the data, the
# sampling or the objective, so a checkpoint taken under other values belongs to
# another experiment. A name covers its sub-fields ('graft' is every graft.*).
# Everything else (workdir, steps, logging, eval, checkpoints, mesh, perf, the
# engine, vLLM and start-up settings) may change; it is logged. A method's own
# section is its ``Method.resume_locked``, passed in as ``locked``.
RESUME_LOCKED = (
    'method', 'seed', 'model_a', 'model_b', 'models', 'data', 'prompts_per_step', 'n',
    'num_minibatches', 'ppo_epochs', 'max_prompt_len', 'max_response_len',
    'rollout.temperature', 'rollout.top_p', 'rollout.top_k', 'optimizer', 'dtype', 'param_dtype', 'clip_low', 'clip_high', 'scale_by_std',
    'old_logp_source', 'reward.kind', 'reward.success_threshold')

# Fields that decide how the checkpoint stores the parameters and optimizer
# state (perf.scan_layers: the blocks stacked on a layer axis, or one entry per
# layer). They leave the math alone, but a checkpoint restores only into its own
# layout.
RESUME_LAYOUT = ('perf.scan_layers',)

def resume_locked(field: str, locked: Iterable[str] = ()) -> bool:
  """``field`` is one of ``RESUME_LOCKED`` or ``locked`` (a method's own sections), or under one."""
  return any(field == f or field.startswith(f + '.') for f in (*RESUME_LOCKED, *locked))


def check_resume(stored: Mapping[str, Any], current: Mapping[str, Any], *,
                 where: str, locked: Iterable[str] = ()) -> list[tuple[str, Any, Any]]:
  """Compares the config a checkpointed run wrote (``stored``) with the one resuming it.

  Both are nested plain dicts (``dataclasses.asdict`` / JSON). Returns the
  ``(field, stored value, current value)`` differences a resume may carry
  (None where the field is missing on one side: configs written by older code,
  whose fields that have since moved (``MOVED``) are read under their new names).

  Raises:
    ConfigError: naming the first field of ``RESUME_LOCKED`` or ``RESUME_LAYOUT``
      that differs and both values; ``where`` names the stored config's file.
  """
  old = {MOVED.get(k, k): v for k, v in flatten(stored).items()}
  new = flatten(current)
  allowed = []
  for field in sorted(old.keys() | new.keys()):
    a, b = old.get(field), new.get(field)
    if field in old and field in new and _plain(a) != _plain(b):
      if resume_locked(field, locked):
        raise ConfigError(
            f'{field} is {_plain(b)!r} but the checkpointed run in {where} has '
            f'{_plain(a)!r}; a resumed run keeps every field that changes the math '
            f'(use another workdir, or checkpoint.resume=False to start over)', field=field)
      if field in RESUME_LAYOUT:
        raise ConfigError(
            f'{field} is {_plain(b)!r} but the checkpointed run in {where} has '
            f'{_plain(a)!r}; it decides how the checkpoint stores the parameters and '
            f'optimizer state, so resume with {field}={_plain(a)!r}', field=field)
      allowed.append((field, a, b))
    elif (field in old) != (field in new):
      allowed.append((field, a, b))
  return allowed


def _plain(value: Any) -> Any:
  """Tuples as lists, as JSON stores them."""
  return list(value) if isinstance(value, tuple) else value


def check_paths(cfg: Any, *, pending: Iterable[str | os.PathLike] = (),
                models: Sequence[tuple[str, Any]] | None = None) -> None:
  """Launch-time check of every file and folder the run opens or writes.

  Output folders (workdir, checkpoint.dir, logging.peer_log_dir) must be
  folders, or creatable, and writable; inputs must exist: each model folder
  with its config.json, the training data, each validation benchmark file,
  the replayed peer's logs, the vLLM interpreter; a reward of your own
  (``reward.kind`` as a dotted path) must import. Folders in ``pending`` are
  built on first use (the toy pair) and may be missing. ``models``: the
  ``(field, PolicyConfig)`` whose folders the run loads (default: every model);
  a method's own inputs are its ``Method.paths``
  (`graft_jax.train.methods.check_paths` runs both).

  Raises:
    PathError: naming the config field, the path and what is wrong with it.
  """
  outputs = [('workdir', cfg.workdir), ('checkpoint.dir', cfg.checkpoint.dir),
             ('logging.peer_log_dir', cfg.logging.peer_log_dir)]
  for field, path in outputs:
    if path:
      check_writable(field, path)
  pending = {pathlib.Path(p).absolute() for p in pending}
  for field, m in policy_fields(cfg) if models is None else models:
    if not (m.path and pathlib.Path(m.path).absolute() in pending):
      check_model_folder(f'{field}.path', m.path)
  needed: list[tuple[str, str]] = []
  if cfg.data.source != 'synthetic':
    needed.append(('data.train_path', cfg.data.train_path))
  if cfg.engine == 'vllm':
    needed.append(('vllm.python', cfg.vllm.python))
  _require(needed)
  if cfg.eval.every_steps:
    _check_benchmarks(cfg.eval)
  if cfg.reward.kind not in reward_select.KINDS:
    try:
      reward_select.import_reward(cfg.reward.kind)
    except reward_select.RewardError as e:
      raise ConfigError(str(e), field='reward.kind') from None


_HF_FOLDER = 'a local Hugging Face model folder: config.json, *.safetensors, tokenizer files'


def check_model_folder(field: str, path: str) -> None:
  """``path`` is a Hugging Face model folder (it has a config.json); ``field`` names it."""
  if not path:
    raise PathError(field, f'is not set (expected {_HF_FOLDER})')
  if not os.path.isdir(path):
    raise PathError(field, f'no such folder {path!r} (expected {_HF_FOLDER})')
  if not pathlib.Path(path, 'config.json').is_file():
    raise PathError(field, f'no config.json in {path!r} (expected {_HF_FOLDER})')


def check_writable(field: str, path: str) -> None:
  """``path`` is a writable folder, or can be made one."""
  p = pathlib.Path(path)
  if p.exists() and not p.is_dir():
    raise PathError(field, f'{path!r} is a file, not a folder')
  first = p.absolute()
  while not first.exists():
    first = first.parent
  if not first.is_dir():
    raise PathError(field, f'cannot create {path!r}: {str(first)!r} is a file')
  if os.statvfs(first).f_flag & os.ST_RDONLY:  # os.access says only "no", as for modes
    raise PathError(field, f'cannot write to {str(first)!r} (read-only file system)')
  if not os.access(first, os.W_OK | os.X_OK):
    raise PathError(field, f'cannot write to {str(first)!r} (permission denied)')


def _check_benchmarks(e) -> None:
  """Every file benchmark of ``eval.suite`` is ``<eval.data_dir>/<name>.{jsonl,json,parquet}``."""
  names = [n for n in e.suite if n != 'synthetic']
  if not names:
    return
  hint = 'or set eval.every_steps=0 to train without validation'
  if not e.data_dir:
    raise PathError('eval.data_dir', f'not set; it holds the validation benchmarks '
                    f'{", ".join(names)} as <name>.jsonl (or .json, .parquet), {hint}')
  if not os.path.isdir(e.data_dir):
    raise PathError('eval.data_dir', f'no such folder {e.data_dir!r}; it holds the validation '
                    f'benchmarks {", ".join(names)} as <name>.jsonl (or .json, .parquet), {hint}')
  missing = []
  for name in names:
    try:
      benchmark_file(e.data_dir, name)
    except FileNotFoundError:
      missing.append(name)
  if missing:
    raise PathError('eval.data_dir', f'no {", ".join(f"{n}.jsonl" for n in missing)} (or .json, '
                    f'.parquet) in {e.data_dir!r} for eval.suite; {hint}')


_BENCHMARK_SUFFIXES = ('.jsonl', '.json', '.parquet')


def benchmark_file(data_dir: str, name: str) -> pathlib.Path:
  """``<data_dir>/<name>.jsonl`` (or .json / .parquet): the first that exists."""
  for suffix in _BENCHMARK_SUFFIXES:
    path = pathlib.Path(data_dir, name + suffix)
    if path.is_file():
      return path
  raise FileNotFoundError(
      f'eval.suite names {name!r}: no {name}.jsonl, {name}.json or {name}.parquet in '
      f'eval.data_dir {data_dir!r}')


def _require(needed: Sequence[tuple[str, str]]) -> None:
  for field, path in needed:
    if not path:
      raise PathError(field, 'is not set')
    if not os.path.exists(path):
      raise PathError(field, f'no such file or folder {path!r}')
