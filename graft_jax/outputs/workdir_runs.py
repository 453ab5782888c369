"""One run per workdir: ``checkpoint.resume=False`` never starts a second run on top of a first.

Started over in place, a new run replaces the old run's metrics rows while the old
checkpoints stay, and the next plain rerun resumes the old run from them: two
runs mixed in one folder. So a run that will not resume refuses a workdir that
holds another run's checkpoints, metrics rows or peer logs, unless
``safety.overwrite`` moves that run aside, whole, to a dated sibling folder.
"""

from __future__ import annotations

import logging
import pathlib
import time

from graft_jax import distributed
from graft_jax.outputs.workdir_lock import LOCK_NAME

log = logging.getLogger(__name__)


class WorkdirInUseError(RuntimeError):
  """``checkpoint.resume=False`` in a workdir that holds another run; names what it holds."""


def _holdings(cfg) -> list[pathlib.Path]:
  """The outputs of a previous run in the config's folders (empty when none)."""
  workdir = pathlib.Path(cfg.workdir)
  found = []
  ckpt = pathlib.Path(cfg.checkpoint_dir)
  if ckpt.is_dir() and any(d.name[:1].isdigit() for d in ckpt.iterdir()):
    found.append(ckpt)
  metrics = workdir / "metrics.jsonl"
  if metrics.is_file() and metrics.stat().st_size:
    found.append(metrics)
  logs = pathlib.Path(cfg.peer_log_dir)
  if logs.is_dir() and any(logs.rglob("*.parquet")):
    found.append(logs)
  return found


def claim(cfg) -> None:
  """For a run that will not resume, makes sure its folders hold no other run: refuses
  (`WorkdirInUseError`, one line) or, with ``safety.overwrite``, moves the old run's
  workdir contents (all but the trainer lock) and any checkpoint or peer-log folder
  outside it to ``<folder>.replaced-<UTC time>``. Process 0 only; a resumed run
  (``checkpoint.resume``) is left alone."""
  if cfg.checkpoint.resume or not distributed.is_writer():
    return
  held = _holdings(cfg)
  if not held:
    return
  if not cfg.safety.overwrite:
    raise WorkdirInUseError(
        f"{cfg.workdir} holds another run ({', '.join(str(p) for p in held)}) and "
        f"checkpoint.resume=False would mix the two; use another workdir, resume it "
        f"(checkpoint.resume=True), or set safety.overwrite=True to move it aside")
  stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
  workdir = pathlib.Path(cfg.workdir).absolute()
  aside = workdir.with_name(f"{workdir.name}.replaced-{stamp}")
  aside.mkdir()
  for entry in workdir.iterdir():
    if entry.name != LOCK_NAME:
      entry.rename(aside / entry.name)
  for folder in (pathlib.Path(cfg.checkpoint_dir), pathlib.Path(cfg.peer_log_dir)):
    folder = folder.absolute()
    if folder.is_dir() and not folder.is_relative_to(workdir):
      folder.rename(folder.with_name(f"{folder.name}.replaced-{stamp}"))
  log.warning("checkpoint.resume=False and safety.overwrite: moved the previous run in %s "
              "to %s", workdir, aside)
