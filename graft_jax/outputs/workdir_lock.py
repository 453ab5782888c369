"""One trainer per workdir: ``<workdir>/trainer.lock`` names its holder (pid, host, start time).

Two trainers on one workdir interleave their metrics rows and overwrite each
other's checkpoints, and both exit 0: a user launching twice, or a requeued job
starting while the old one is still dying. The holder keeps an exclusive
``flock`` on the file while it runs, so on one host a dead holder's lock is
free whatever became of its pid, and a live one's is not; the JSON inside names
the holder for the refusal, and decides where ``flock`` cannot: a lock of a dead
pid on this host, or of an earlier attempt of this same SLURM job (which SLURM
ended before requeueing it), is taken over with a warning; one held from
another host is not, since its pid cannot be checked from here. The file is
removed on release. Evaluation and other readers never take it.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import logging
import os
import pathlib
import socket

import numpy as np

from graft_jax import distributed
from graft_jax.outputs import storage

log = logging.getLogger(__name__)

LOCK_NAME = "trainer.lock"


class WorkdirBusyError(RuntimeError):
  """Another trainer holds the workdir; the message names it."""


def _me() -> dict:
  return {"pid": os.getpid(), "host": socket.gethostname(),
          "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
          "slurm_restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)}


def describe(holder: dict) -> str:
  return (f"pid {holder.get('pid')} on host {holder.get('host')}, started "
          f"{holder.get('started')}")


def _pid_alive(pid) -> bool:
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, ValueError, TypeError):
    return True  # another user's process, or a pid we cannot read: assume it runs
  return True


def _try_flock(fd: int) -> bool | None:
  """True: locked; False: another open file holds it; None: the file system has no flock."""
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return True
  except OSError as e:
    if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
      return False
    if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
      return None
    raise


def _read(fd: int) -> dict:
  os.lseek(fd, 0, os.SEEK_SET)
  text = os.read(fd, 1 << 16).decode("utf-8", "replace").strip()
  if not text:
    return {}
  try:
    holder = json.loads(text)
  except json.JSONDecodeError:
    return {"pid": None, "host": None, "started": None, "unreadable": text[:80]}
  return holder if isinstance(holder, dict) else {}


class WorkdirLock:
  """The lock on ``workdir``; ``acquire`` takes it or raises ``WorkdirBusyError``."""

  def __init__(self, workdir):
    self.path = pathlib.Path(workdir).absolute() / LOCK_NAME
    self._fd: int | None = None

  def acquire(self) -> WorkdirLock:
    try:
      self.path.parent.mkdir(parents=True, exist_ok=True)
      while True:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
          if self._take(fd):
            self._fd = fd
            return self
        except BaseException:
          os.close(fd)
          raise
        os.close(fd)  # the holder removed the file between our open and flock: again
    except OSError as e:
      raise storage.as_storage_error(e, self.path.parent) or e

  def _take(self, fd: int) -> bool:
    locked = _try_flock(fd)
    holder = _read(fd)
    if locked is False:
      raise self._busy(holder)
    try:
      if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
        return False
    except FileNotFoundError:
      return False
    if holder:
      if not self._stale(holder, flocked=locked is True):
        raise self._busy(holder)
      log.warning("%s: taking over the lock of %s, which is no longer running", self.path,
                  describe(holder))
    me = json.dumps(_me()).encode() + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, me, 0)
    os.fsync(fd)
    return True

  def _stale(self, holder: dict, *, flocked: bool) -> bool:
    """Whether a lock whose file we could flock belongs to a process that has ended."""
    job = os.environ.get("SLURM_JOB_ID")
    if job and holder.get("slurm_job_id") == job and (
        int(holder.get("slurm_restart_count") or 0)
        < int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)):
      return True  # an earlier attempt of this job: SLURM ended it before the requeue
    if holder.get("host") != socket.gethostname():
      return False
    # On this host a live holder keeps its flock; without flock, ask about the pid.
    return flocked or not _pid_alive(holder.get("pid"))

  def _busy(self, holder: dict) -> WorkdirBusyError:
    if not holder:
      who = "another trainer (starting)"
    elif holder.get("unreadable"):
      who = f"a lock file that is not ours ({holder['unreadable']!r})"
    else:
      who = f"a trainer: {describe(holder)}"
    gone = ("" if holder.get("host") in (None, socket.gethostname()) else
            f"; if it no longer runs on {holder['host']}, delete {self.path}")
    return WorkdirBusyError(f"{self.path.parent} is in use by {who}; wait for it to end, stop "
                            f"it, or pass another --workdir{gone}")

  def release(self) -> None:
    """Removes the file and drops the flock (the file first: no one locks a removed file)."""
    if self._fd is None:
      return
    try:
      if os.fstat(self._fd).st_ino == os.stat(self.path).st_ino:
        self.path.unlink()
    except FileNotFoundError:
      pass
    finally:
      os.close(self._fd)
      self._fd = None


@contextlib.contextmanager
def held(workdir):
  """Holds the workdir's lock for the block: process 0 takes it, and every process of a
  multi-process run stops when process 0 could not (process 0's line names the holder)."""
  lock, error = None, None
  if distributed.is_writer():
    try:
      lock = WorkdirLock(workdir).acquire()
    except Exception as e:  # noqa: BLE001  (re-raised below, after the others know)
      error = e
  ok = distributed.from_writer({"ok": np.array(error is None)})["ok"]
  if error is not None:
    raise error
  if not ok:
    raise WorkdirBusyError(f"{workdir}: process 0 could not take the workdir lock (its line "
                           f"says why)")
  try:
    yield lock
  finally:
    if lock is not None:
      lock.release()
