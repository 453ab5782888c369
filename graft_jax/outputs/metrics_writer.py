"""Per-step metrics: metrics.jsonl, TensorBoard scalars, Weights & Biases (``wandb_log``)
and the progress bar (``progress``).

Nested dicts flatten to 'a/reward_mean'; non-finite numbers become JSON null.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
from typing import Any, Mapping

import numpy as np

from graft_jax.outputs import cost_totals, progress
from graft_jax.outputs.metrics_file import MetricsFile, read_jsonl, scalars  # re-exported

__all__ = ['MetricsWriter', 'flatten', 'read_jsonl', 'scalars', 'to_json_value']


def flatten(metrics: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
  """{'a': {'reward_mean': 1}} -> {'a/reward_mean': 1}."""
  flat: dict[str, Any] = {}
  for key, value in metrics.items():
    name = f'{prefix}{key}'
    if isinstance(value, Mapping):
      flat.update(flatten(value, prefix=f'{name}/'))
    else:
      flat[name] = value
  return flat


def to_json_value(value: Any) -> Any:
  """Host Python value for JSON: arrays to numbers or lists, NaN/inf to None."""
  if isinstance(value, (str, bool)) or value is None:
    return value
  if isinstance(value, (list, tuple)):
    return [to_json_value(v) for v in value]
  if hasattr(value, '__array__'):  # NumPy / JAX arrays and scalars
    arr = np.asarray(value)
    if arr.dtype.kind == 'V':  # ml_dtypes (bfloat16, float8) report 'V'
      arr = arr.astype(np.float32)
    return to_json_value(arr.item() if arr.ndim == 0 else arr.tolist())
  if isinstance(value, float):
    return value if math.isfinite(value) else None
  if isinstance(value, int):
    return value
  return str(value)


class MetricsWriter:
  """Appends one JSON line per step, mirrors scalars to TensorBoard and the progress bar.

  Only one process of a multi-host run writes: the trainer passes
  `enabled=graft_jax.distributed.is_writer()` (process 0).
  """

  def __init__(self, workdir: str | os.PathLike, *,
               total_steps: int | None = None, initial_step: int = 0,
               tensorboard: bool = True, progress_bar: bool = True,
               wandb: Mapping[str, Any] | None = None, enabled: bool = True):
    """``wandb``: None, or the keyword arguments of `wandb_log.WandbLog` (project,
    entity, name, mode, config) to mirror the scalars to a W&B run."""
    self.enabled = enabled
    self.path = pathlib.Path(workdir) / 'metrics.jsonl'
    self._file = self._tb = self._bar = self._wandb = None
    self._previous = None  # the last row: the running cost totals go on from it
    if not enabled:
      return
    self.path.parent.mkdir(parents=True, exist_ok=True)
    # Rows of steps >= initial_step belong to an abandoned attempt: dropped, then rewritten.
    self._file = MetricsFile(self.path, first_step=initial_step)
    self._previous = self._file.last_row()
    if tensorboard:
      import tensorboardX  # Deferred: it pulls in protobuf at import time.
      # purge_step: TensorBoard hides the abandoned attempt's events of steps >= initial_step.
      self._tb = tensorboardX.SummaryWriter(
          logdir=str(pathlib.Path(workdir) / 'tensorboard'), purge_step=initial_step)
    if wandb is not None:
      from graft_jax.outputs.wandb_log import WandbLog  # pylint: disable=import-outside-toplevel
      self._wandb = WandbLog(workdir, **wandb)
    if progress_bar:
      self._bar = progress.ProgressBar(total_steps, initial_step)

  def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Records one step; returns the flattened, JSON-ready record, with the run's running
    cost totals (`cost_totals.RUNNING`)."""
    record = {'step': int(step), 'time': time.time()}
    record.update({k: to_json_value(v) for k, v in flatten(metrics).items()})
    self._previous = cost_totals.add_running_totals(record, self._previous)
    if not self.enabled:
      return record
    self._file.append(json.dumps(record, allow_nan=False) + '\n')  # flushed and fsynced
    if self._tb is not None:
      for key, value in scalars(record).items():
        if key != 'step':
          self._tb.add_scalar(key, float(value), global_step=step)
      self._tb.flush()
    if self._wandb is not None:
      self._wandb.log(record)
    if self._bar is not None:
      self._bar.update(step, record)
    return record

  def close(self) -> None:
    for handle in (self._file, self._tb, self._wandb, self._bar):
      if handle is not None:
        handle.close()
    self._file = self._tb = self._wandb = self._bar = None

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
