"""Per-step metrics: metrics.jsonl, TensorBoard scalars and a tqdm bar.

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
import tqdm

# Short label on the progress bar -> flattened metric key. The step decides
# which keys exist; absent ones are left off the bar.
DEFAULT_HEADLINE = {
    'rA': 'a/reward_mean',
    'rB': 'b/reward_mean',
    'grafted': 'graft/grafted_groups',
    'admit': 'graft/admission_rate',
}


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


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
  """Records of a metrics.jsonl, the last one per step (a resumed run rewrites
  the steps after its checkpoint), ordered by step."""
  by_step: dict[int, dict[str, Any]] = {}
  with open(path) as f:
    for line in f:
      if line.strip():
        record = json.loads(line)
        by_step[record['step']] = record
  return [by_step[s] for s in sorted(by_step)]


class MetricsWriter:
  """Appends one JSON line per step, mirrors scalars to TensorBoard and tqdm.

  Only one process of a multi-host run should write (`enabled`).
  """

  def __init__(self, workdir: str | os.PathLike, *,
               total_steps: int | None = None, initial_step: int = 0,
               tensorboard: bool = True, progress_bar: bool = True,
               headline: Mapping[str, str] | None = None,
               enabled: bool = True):
    self.enabled = enabled
    self.headline = dict(DEFAULT_HEADLINE if headline is None else headline)
    self.path = pathlib.Path(workdir) / 'metrics.jsonl'
    self._file = self._tb = self._bar = None
    if not enabled:
      return
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self._drop_steps_from(initial_step)
    self._file = open(self.path, 'a', encoding='utf-8')
    if tensorboard:
      import tensorboardX  # Deferred: it pulls in protobuf at import time.
      self._tb = tensorboardX.SummaryWriter(
          logdir=str(pathlib.Path(workdir) / 'tensorboard'))
    if progress_bar:
      self._bar = tqdm.tqdm(total=total_steps, initial=initial_step,
                            unit='step', dynamic_ncols=True)

  def _drop_steps_from(self, first_step: int) -> None:
    """Removes records of steps >= first_step: a run restarted (or resumed) there rewrites them."""
    if not self.path.exists():
      return
    with open(self.path, encoding='utf-8') as f:
      lines = f.readlines()
    keep = [line for line in lines if line.strip() and json.loads(line)['step'] < first_step]
    if len(keep) != len(lines):
      tmp = self.path.with_suffix('.jsonl.tmp')
      tmp.write_text(''.join(keep), encoding='utf-8')
      os.replace(tmp, self.path)

  def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Records one step; returns the flattened, JSON-ready record."""
    record = {'step': int(step), 'time': time.time()}
    record.update({k: to_json_value(v) for k, v in flatten(metrics).items()})
    if not self.enabled:
      return record
    self._file.write(json.dumps(record, allow_nan=False) + '\n')
    self._file.flush()
    if self._tb is not None:
      for key, value in record.items():
        # Scalars only; null (non-finite) would plot as a broken point.
        if key not in ('step', 'time') and isinstance(value, (int, float)):
          self._tb.add_scalar(key, float(value), global_step=step)
      self._tb.flush()
    if self._bar is not None:
      self._bar.update(max(0, step - self._bar.n))
      postfix = {label: _short(record[key])
                 for label, key in self.headline.items() if key in record}
      self._bar.set_postfix(postfix, refresh=True)
    return record

  def close(self) -> None:
    for handle in (self._file, self._tb, self._bar):
      if handle is not None:
        handle.close()
    self._file = self._tb = self._bar = None

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def _short(value: Any) -> str:
  if isinstance(value, float):
    return f'{value:.3g}'
  return str(value)
