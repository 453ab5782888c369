"""Validation of a `TrainConfig`: one-line errors that name the field.

`validate` runs before anything loads; `check_paths` is the launch-time check
of files and folders the run will open.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Sequence

METHODS = ('graft', 'grpo', 'hacpo', 'sgt', 'replay')
_ENUMS = {
    'method': METHODS,
    'engine': ('jax', 'vllm'),
    'dtype': ('bfloat16', 'float32', 'float16'),
    'param_dtype': ('float32', 'bfloat16'),
    'old_logp_source': ('teacher_forced', 'sampler'),
    'data.format': ('jsonl', 'parquet', 'synthetic'),
    'optimizer.name': ('adamw',),
    'optimizer.schedule': ('constant',),
    'graft.order': ('peer_last', 'peer_first', 'uniform'),
    'graft.advantages': ('source', 'pooled'),
    'graft.transfer': ('full', 'success_only'),
    'graft.gate': ('on', 'off'),
    'graft.ratio_level': ('token', 'sequence'),
    'vllm.dtype': ('bfloat16', 'float16', 'float32', 'auto'),
}
# Model names become file and folder names of the peer logs.
_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*$')


class ConfigError(ValueError):
  """An impossible config value or combination; the message names the field."""


def _get(cfg: Any, field: str) -> Any:
  for part in field.split('.'):
    cfg = getattr(cfg, part)
  return cfg


def _fmt(x: float) -> str:
  return f'{x:g}' if isinstance(x, float) else str(x)


def _check_range(cfg, field, lo=None, hi=None, lo_open=False, hi_open=False):
  """Raises unless lo <= value <= hi (strict where *_open)."""
  x = _get(cfg, field)
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
  raise ConfigError(f'{field} must be {want}, got {_fmt(x)}')


def validate(cfg: Any) -> None:
  """Raises `ConfigError` on the first impossible value or combination."""
  for field, allowed in _ENUMS.items():
    value = _get(cfg, field)
    if value not in allowed:
      raise ConfigError(f'{field} must be one of {", ".join(allowed)}, '
                        f'got {value!r}')
  _check_models(cfg)
  _check_batching(cfg)
  _check_optimization(cfg)
  _check_methods(cfg)
  _check_io(cfg)


def _check_models(cfg) -> None:
  for field in ('model_a.name', 'model_b.name'):
    name = _get(cfg, field)
    if not _NAME_RE.match(name):
      raise ConfigError(f'{field} must be a file-safe name '
                        f'([A-Za-z0-9._-], not starting with . or -), '
                        f'got {name!r}')
  if cfg.model_a.name == cfg.model_b.name:
    raise ConfigError(f'model_a.name and model_b.name must differ (they key '
                      f'logs and metrics), both are {cfg.model_a.name!r}')


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
  sizes = {k: _get(cfg, f'mesh.{k}') for k in ('data', 'fsdp', 'tensor')}
  for axis, size in sizes.items():
    if size != -1 and size < 1:
      raise ConfigError(f'mesh.{axis} must be >= 1 or -1 (the rest), '
                        f'got {size}')
  if list(sizes.values()).count(-1) > 1:
    raise ConfigError(f'at most one mesh axis may be -1, got {sizes}')
  if cfg.data.format == 'synthetic':
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
  if cfg.method == 'hacpo' and cfg.prompts_per_step % h.minibatch_prompts:
    raise ConfigError(
        f'hacpo.minibatch_prompts ({h.minibatch_prompts}) must divide '
        f'prompts_per_step ({cfg.prompts_per_step})')
  _check_range(cfg, 'sgt.coef', lo=0)
  if cfg.replay.balance:
    raise ConfigError('replay.balance must be False (replay is one-way)')
  if cfg.method == 'replay' and not cfg.replay.log_dir:
    raise ConfigError('method=replay needs replay.log_dir')


def _check_io(cfg) -> None:
  _check_range(cfg, 'reward.timeout_s', lo=0, lo_open=True)
  _check_range(cfg, 'reward.num_workers', lo=1)
  _check_range(cfg, 'eval.every_steps', lo=0)
  _check_range(cfg, 'eval.temperature', lo=0)
  _check_range(cfg, 'eval.top_p', lo=0, hi=1, lo_open=True)
  _check_range(cfg, 'eval.k', lo=1)
  _check_range(cfg, 'eval.max_examples', lo=0)
  if cfg.eval.every_steps and not cfg.eval.suite:
    raise ConfigError('eval.suite is empty; name a benchmark or set eval.every_steps=0')
  _check_range(cfg, 'checkpoint.every_steps', lo=0)
  _check_range(cfg, 'checkpoint.keep', lo=1)
  _check_range(cfg, 'logging.every_steps', lo=1)
  v = cfg.vllm
  _check_range(cfg, 'vllm.gpu_memory_utilization', lo=0, hi=1, lo_open=True)
  _check_range(cfg, 'vllm.tensor_parallel_size', lo=1)
  _check_range(cfg, 'vllm.startup_timeout_s', lo=0, lo_open=True)
  _check_range(cfg, 'vllm.check_every', lo=0)
  _check_range(cfg, 'vllm.probe_tolerance', lo=0)
  _check_range(cfg, 'vllm.max_restarts', lo=0)
  _check_range(cfg, 'vllm.request_timeout_s', lo=0, lo_open=True)
  _check_range(cfg, 'vllm.health_every_s', lo=0, lo_open=True)
  _check_range(cfg, 'vllm.max_concurrency', lo=1)
  need = cfg.max_prompt_len + cfg.max_response_len
  if cfg.engine == 'vllm' and 0 < v.max_model_len < need:
    raise ConfigError(
        f'vllm.max_model_len ({v.max_model_len}) must be 0 or >= '
        f'max_prompt_len + max_response_len ({need})')
  _check_range(cfg, 'vllm.max_model_len', lo=0)


def check_paths(cfg: Any) -> None:
  """Launch-time check that every input file or folder the run opens exists.

  Raises:
    FileNotFoundError: naming the config field and the missing path.
  """
  needed: list[tuple[str, str]] = [('model_a.path', cfg.model_a.path)]
  if cfg.method == 'replay':
    needed.append(('replay.log_dir', cfg.replay.log_dir))
  else:
    needed.append(('model_b.path', cfg.model_b.path))
  if cfg.data.format != 'synthetic':
    needed.append(('data.train_path', cfg.data.train_path))
  if cfg.eval.every_steps and any(name != 'synthetic' for name in cfg.eval.suite):
    needed.append(('eval.data_dir', cfg.eval.data_dir))  # the suite's benchmark files
  if cfg.engine == 'vllm':
    needed.append(('vllm.python', cfg.vllm.python))
  _require(needed)


def _require(needed: Sequence[tuple[str, str]]) -> None:
  for field, path in needed:
    if not path:
      raise FileNotFoundError(f'{field} is not set')
    if not os.path.exists(path):
      raise FileNotFoundError(f'{field}: no such file or folder {path!r}')
