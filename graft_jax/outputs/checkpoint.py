"""Orbax checkpoints of the whole run: a pytree of arrays plus JSON metadata.

The pytree holds both policies, both optimizer states and the RNG keys; the
metadata holds the data position, step, HACPO capability state and peer-log
cursor. An interrupted save never hides the previous checkpoint, and its
leftover temporary folder is removed at the next start (it would otherwise
keep the disk full that interrupted it). A full or read-only disk raises
`graft_jax.outputs.storage.StorageError` naming the folder, before orbax starts
writing when the free space is visibly short. In a multi-process run every
process calls `save` and `restore` (orbax writes and reads each process's
shards; process 0 the metadata), and only process 0 sets interrupted saves
aside, the others waiting for it.

With ``async_save``, ``save`` returns once the state is copied to host memory
(the device buffers may then be donated to the next update) and orbax writes
and commits it in a thread; the next ``save``, ``steps`` or ``wait`` waits for
that commit and reports a failure of it. A kill during the write leaves an
uncommitted folder, set aside at the next start like any interrupted save.

Integrity: once a step commits, process 0 records its files' checksums
(`checkpoint_manifest`); a restore verifies the newest step first, and one that
fails is renamed ``<step>.corrupt-<time>`` (never deleted) with one line and the
next older one is tried. Keep-last-N runs here, not in orbax, right after a new
step's checksums are written: an older step goes only once a newer one is known
good.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import time
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from graft_jax import distributed
# Orbax writes COMMIT_MARKER into a step folder as the last act of a save (before
# the atomic rename on POSIX, in place on object stores); a folder without it
# is an interrupted save. The config's resume check reads it too, hence its home.
from graft_jax.config.run_config import COMMIT_MARKER
from graft_jax.outputs import checkpoint_manifest, storage

# Orbax writes a step into '<step>.orbax-checkpoint-tmp[-<time>]' and renames it on commit.
TMP_MARKER = '.orbax-checkpoint-tmp'
# A committed step whose files failed their checksums is renamed '<step>.corrupt-<time>'.
CORRUPT_MARKER = '.corrupt-'


class CheckpointError(RuntimeError):
  """A committed checkpoint that cannot be restored; names its folder."""


class Checkpointer:
  """Saves every `every_steps` steps, keeps the last `keep` committed ones."""

  def __init__(self, directory: str | os.PathLike, *, every_steps: int,
               keep: int, async_save: bool = True):
    self.directory = pathlib.Path(directory).absolute()
    self.every_steps, self.keep, self._async = every_steps, keep, async_save
    self._pending: list[int] = []  # saved steps whose checksums are not written yet
    try:
      self.directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
      raise storage.as_storage_error(e, self.directory) or e
    # Before the manager lists steps: its keep-last-N cleanup would count an
    # interrupted step folder and delete a good checkpoint in its place.
    self._set_aside_uncommitted()
    # No max_to_keep: orbax would rotate before the new step's checksums exist (`_rotate`).
    options = ocp.CheckpointManagerOptions(
        create=True, enable_async_checkpointing=async_save)
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def should_save(self, step: int) -> bool:
    return self.every_steps > 0 and step % self.every_steps == 0

  def save(self, step: int, state: Any, metadata: dict[str, Any], *,
           force: bool = False) -> bool:
    """Saves if `step` is on the interval (or `force`); returns whether it did.

    Args:
      step: the training step the state belongs to (after its update).
      state: pytree of jax arrays (typed PRNG keys included).
      metadata: JSON-serializable dict (data position, cursors, ...).
      force: save off-interval, e.g. at the last step.
    """
    if not (force or self.should_save(step)):
      return False
    try:
      json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as e:
      raise ValueError(f'checkpoint metadata must be plain JSON: {e}') from e
    args = ocp.args.Composite(state=ocp.args.StandardSave(state),
                              metadata=ocp.args.JsonSave(metadata))
    # Uncompressed size: orbax compresses, so this errs towards refusing early.
    storage.require_space(self.directory, _nbytes(state), f'checkpoint {step}')
    try:
      with storage.quiet_unless_unexplained('absl', 'orbax', 'tensorstore'):
        saved = bool(self._manager.save(step, args=args, force=True))
    except Exception as e:  # orbax and tensorstore wrap OSErrors in many types
      fault = storage.as_storage_error(e, self.directory / str(step))
      if fault is None:
        raise
      raise fault from e
    self._pending.append(step)
    if not self._async:  # committed; an async save is finished by the next `wait`, on
      self._finish()     # every process alike (`_finish` syncs them)
    return saved

  def steps(self) -> list[int]:
    """Committed steps, ascending, once the saves in flight have committed (a listing read
    from disk meanwhile would drop them from orbax's own, which its keep-last-N reads)."""
    self.wait()
    self._manager.reload()
    return sorted(s for s in self._manager.all_steps()
                  if self._committed(s))

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """Restores `step` into the structure, dtypes and shardings given.

    Args:
      step: a committed step.
      abstract_state: pytree like the saved one, of arrays or
        `jax.ShapeDtypeStruct`s (their shardings place the restored arrays).

    Returns:
      (state, metadata).
    """
    target = jax.tree.map(_abstract, abstract_state)
    args = ocp.args.Composite(state=ocp.args.StandardRestore(target),
                              metadata=ocp.args.JsonRestore())
    try:
      out = self._manager.restore(step, args=args)
    except Exception as e:  # orbax raises many types; name the folder
      raise CheckpointError(
          f'checkpoint {self.directory / str(step)} is committed but cannot '
          f'be restored ({type(e).__name__}: {e}); if the state structure '
          f'changed, restore with the old code; otherwise move the folder '
          f'aside to resume from the previous one') from e
    return out['state'], dict(out['metadata'])

  def restore_latest(self, abstract_state: Any) -> tuple[Any, dict] | None:
    """(state, metadata) of the newest committed step whose files match their checksums,
    or None if none; the newer ones that do not are set aside."""
    self.wait()
    self._set_aside_uncommitted()
    if distributed.is_writer():
      self._set_aside_corrupt()
    distributed.sync('checkpoint-verified')
    steps = self.steps()
    damaged = sorted(p.name for p in self.directory.glob(f'*{CORRUPT_MARKER}*'))
    if not steps and damaged:  # starting over would drop the run's rows and logs
      raise CheckpointError(
          f'every checkpoint in {self.directory} failed its checksums ({", ".join(damaged)}); '
          f'rename one back to its step number to resume from it unverified, or start over '
          f'with checkpoint.resume=False safety.overwrite=True')
    if not steps:
      return None
    return self.restore(steps[-1], abstract_state)

  def wait(self) -> None:
    """Blocks until in-flight async saves are committed."""
    try:
      self._manager.wait_until_finished()
    except Exception as e:  # an async save that failed on a full disk
      fault = storage.as_storage_error(e, self.directory)
      if fault is None:
        raise
      raise fault from e
    self._finish()

  def _finish(self) -> None:
    """Writes the checksums of the saves that committed since the last call (process 0),
    then drops the committed steps older than the newest `keep`."""
    if not self._pending:
      return
    done, self._pending = self._pending, []
    if distributed.is_writer():
      try:
        for step in done:
          if self._committed(step):
            checkpoint_manifest.write(self.directory / str(step))
        self._rotate()
      except OSError as e:
        raise storage.as_storage_error(e, self.directory) or e
    distributed.sync('checkpoint-manifest')
    self._manager.reload()

  def _rotate(self) -> None:
    """Deletes committed steps beyond the newest `keep`, only while the newest one has
    checksums (it was just verified as written: a good newer step exists)."""
    steps = sorted(int(d.name) for d in self.directory.iterdir()
                   if d.name.isdigit() and (d / COMMIT_MARKER).exists())
    if not steps or not checkpoint_manifest.has_manifest(self.directory / str(steps[-1])):
      return
    for step in steps[:-self.keep]:
      shutil.rmtree(self.directory / str(step))

  def _set_aside_corrupt(self) -> None:
    """From the newest committed step back, renames each whose files fail their checksums
    (one line each) until one passes or has none (saved before checksums were kept)."""
    for step in sorted((int(d.name) for d in self.directory.iterdir()
                        if d.name.isdigit() and self._committed(int(d.name))), reverse=True):
      folder = self.directory / str(step)
      if not checkpoint_manifest.has_manifest(folder):
        logging.warning('checkpoint %s has no checksums (saved before they were kept); '
                        'restoring it unverified', folder)
        return
      fault = checkpoint_manifest.verify(folder)
      if fault is None:
        return
      target = folder.with_name(f'{step}{CORRUPT_MARKER}{time.time_ns()}')
      folder.rename(target)
      logging.warning('checkpoint %s is damaged (%s); moved it to %s and trying the one '
                      'before', folder, fault, target.name)

  def close(self) -> None:
    """Waits for in-flight saves and stops orbax's threads; a save that failed was reported
    by ``save`` or ``wait`` already, so closing after it stays quiet."""
    try:
      self._manager.wait_until_finished()
      if not distributed.multi_process():  # a run that failed: no sync the others may skip
        self._finish()
    except Exception as e:  # pylint: disable=broad-except
      reported = storage.as_storage_error(e, self.directory) is not None
      logging.log(logging.DEBUG if reported else logging.WARNING,
                  'a checkpoint save in %s failed: %s', self.directory, e)
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def _committed(self, step: int) -> bool:
    return (self.directory / str(step) / COMMIT_MARKER).exists()

  def _set_aside_uncommitted(self) -> None:
    """Removes orbax's temporaries of uncommitted saves; renames interrupted step folders
    so no step listing sees them.

    Step folders are renamed rather than deleted: a person may want to look
    inside. Temporaries are deleted: they hold nothing a committed step does
    not, and after a full disk they are what keeps it full.
    """
    if distributed.is_writer():
      try:
        self._clean_interrupted()
      except OSError as e:
        raise storage.as_storage_error(e, self.directory) or e
    # No process lists steps before process 0 has moved the interrupted ones aside.
    distributed.sync('checkpoint-set-aside')

  def _clean_interrupted(self) -> None:
    for entry in self.directory.iterdir():
      if entry.is_dir() and TMP_MARKER in entry.name:
        logging.warning('removing %s, the temporary folder of a checkpoint save that never '
                        'committed', entry)
        shutil.rmtree(entry)
      elif (entry.is_dir() and entry.name.isdigit()
            and not (entry / COMMIT_MARKER).exists()):
        target = entry.with_name(f'{entry.name}.uncommitted-{time.time_ns()}')
        logging.warning('checkpoint %s was never committed (interrupted '
                        'save); moving it to %s', entry, target.name)
        entry.rename(target)


def _nbytes(state: Any) -> int:
  total = 0
  for x in jax.tree.leaves(state):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    total += x.size * x.dtype.itemsize
  return total


def _abstract(x: Any) -> Any:
  if isinstance(x, jax.ShapeDtypeStruct):
    return x
  return jax.ShapeDtypeStruct(x.shape, x.dtype,
                              sharding=getattr(x, 'sharding', None))
