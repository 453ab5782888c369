"""Weights & Biases logging of the per-step metrics (``logging.wandb``): one W&B run per workdir.

The W&B run's id is kept in ``<workdir>/wandb_run_id``, so the same command that
resumes the training resumes its W&B run. Every scalar of a metrics row is
logged against the row's ``step`` (W&B's x-axis for all of them, through
``define_metric``) rather than W&B's own counter: a run resumed from an earlier
checkpoint logs its steps again, and W&B keeps both attempts' points instead of
dropping the second. ``metrics.jsonl`` stays the record of the run; non-finite
values, written there as null, are left out here. W&B's files go to
``<workdir>/wandb``; ``mode='offline'`` keeps them there for ``wandb sync``.
"""

from __future__ import annotations

import os
import pathlib
import secrets
from typing import Any, Mapping

from graft_jax.outputs.metrics_file import scalars

RUN_ID_FILE = 'wandb_run_id'


class WandbLog:
  """A W&B run that takes the metrics rows of `MetricsWriter`."""

  def __init__(self, workdir: str | os.PathLike, *, project: str, entity: str = '',
               name: str = '', mode: str = 'online', config: Mapping[str, Any] | None = None):
    import wandb  # pylint: disable=import-outside-toplevel  (an optional extra)
    work = pathlib.Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    id_file = work / RUN_ID_FILE
    if not id_file.exists():
      id_file.write_text(secrets.token_hex(4) + '\n')
    run_id = id_file.read_text().strip()
    self.run = wandb.init(
        project=project, entity=entity or None, name=name or work.resolve().name, id=run_id,
        resume='allow', dir=str(work), mode=mode, config=dict(config or {}),
        settings=wandb.Settings(console='off', quiet=True))
    self.run.define_metric('step')
    self.run.define_metric('*', step_metric='step')

  def log(self, record: Mapping[str, Any]) -> None:
    """One metrics row (flattened, as `MetricsWriter.write` returns it)."""
    self.run.log(scalars(record))

  def close(self) -> None:
    self.run.finish()
