"""Disk faults of a run (full disk, quota, file size limit, read-only file system) as one error
naming the path.

Python raises ``OSError`` with an errno; tensorstore (orbax's array writer)
raises ``ValueError('RESOURCE_EXHAUSTED: ... local file "<path>" ...
[os_error_code='28']')``, often as the cause or context of another error.
`fault` recognises both anywhere in an exception's chain, so every writer of
the run can turn them into a `StorageError` that says which path failed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re

# errno -> what to tell the person running the job.
FAULTS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file size limit exceeded (ulimit -f)",
    errno.EROFS: "read-only file system",
}
_OS_ERROR_CODE = re.compile(r"os_error_code='?(\d+)")
_LOCAL_FILE = re.compile(r'local file "([^"]+)"')


class StorageError(OSError):
  """The run cannot write ``path`` (disk full, quota, size limit, read-only); committed files
  are intact."""

  def __init__(self, path, reason: str, code: int):
    super().__init__(code, f"cannot write {path}: {reason}; committed checkpoints, "
                     f"metrics rows and peer logs are intact, free space (or fix the "
                     f"mount) and rerun the same command to resume")
    self.path = str(path)

  def __str__(self) -> str:
    return self.strerror


def _chain(exc: BaseException):
  seen = set()
  while exc is not None and id(exc) not in seen:
    seen.add(id(exc))
    yield exc
    exc = exc.__cause__ or exc.__context__


def fault(exc: BaseException) -> tuple[int, str | None] | None:
  """``(errno, path or None)`` when ``exc`` (or its cause) is a disk fault, else None."""
  for e in _chain(exc):
    if isinstance(e, StorageError):
      return e.errno, e.path
    if isinstance(e, OSError) and e.errno in FAULTS:
      return e.errno, e.filename
    m = _OS_ERROR_CODE.search(str(e))
    if m and int(m[1]) in FAULTS:
      path = _LOCAL_FILE.search(str(e))
      return int(m[1]), path[1] if path else None
  return None


def as_storage_error(exc: BaseException, path) -> StorageError | None:
  """A `StorageError` naming the failing file (else ``path``) if ``exc`` is a disk fault."""
  if isinstance(exc, StorageError):
    return exc
  got = fault(exc)
  if got is None:
    return None
  code, where = got
  return StorageError(where or path, FAULTS[code], code)


def require_space(path: str | os.PathLike, nbytes: int, what: str) -> None:
  """Raises `StorageError` if ``path``'s file system is read-only or has under ``nbytes`` free.

  Checked before a write that cannot fail tidily: orbax's threads, failing
  half-way through a save on a full disk, print dozens of tracebacks.
  """
  st = os.statvfs(path)
  if st.f_flag & os.ST_RDONLY:
    raise StorageError(path, FAULTS[errno.EROFS], errno.EROFS)
  free = st.f_bavail * st.f_frsize
  if free < nbytes:
    raise StorageError(path, f"{FAULTS[errno.ENOSPC]} for {what} (needs up to {nbytes:,} bytes, "
                       f"{free:,} free)", errno.ENOSPC)


@contextlib.contextmanager
def quiet_unless_unexplained(*loggers: str):
  """Holds back the log records of ``loggers`` (orbax's, tensorstore's) during the block: a
  disk fault raised from it is reported as one `StorageError`, so its kilobytes of
  tracebacks are dropped (kept at DEBUG); anything else lets them through afterwards."""
  held: list[logging.LogRecord] = []
  handler = _Hold(held)
  saved = [(logging.getLogger(n), logging.getLogger(n).propagate) for n in loggers]
  for logger, _ in saved:
    logger.addHandler(handler)
    logger.propagate = False
  explained = False
  try:
    yield
  except Exception as e:
    explained = fault(e) is not None
    raise
  finally:
    for logger, propagate in saved:
      logger.removeHandler(handler)
      logger.propagate = propagate
    for record in held:
      logger = logging.getLogger(record.name)
      if explained:
        if not logger.isEnabledFor(logging.DEBUG):
          continue
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
      logger.handle(record)


class _Hold(logging.Handler):
  def __init__(self, held: list):
    super().__init__(logging.DEBUG)
    self.held = held

  def emit(self, record: logging.LogRecord) -> None:
    self.held.append(record)
