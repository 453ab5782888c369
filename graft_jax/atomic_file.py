"""Writing a file so that a reader sees the old contents or the new ones, never half of either.

The run's small files (config.json, metrics.jsonl rewritten on resume, the peer
logs' parquet and manifests) are read by other processes of the run and by a
resumed one; a crash or a full disk mid-write must leave the previous file whole.
So each is written to a temporary file beside it, synced, and renamed over it;
the folder is synced too, so the rename itself survives a power cut.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import secrets

_CHUNK = 1 << 20


def file_sha256(path: str | os.PathLike) -> str:
  """The sha256 of a file's bytes, read in chunks (a checkpoint's files can be gigabytes):
  the one digest the checkpoint manifests and the prepared data sets record."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      h.update(chunk)
  return h.hexdigest()


def fsync_dir(path: str | os.PathLike) -> None:
  """Makes a rename or a new file in the folder ``path`` durable."""
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def write_atomically(path: str | os.PathLike, data: str | bytes) -> None:
  """Writes ``data`` (text as UTF-8) to ``path`` through a synced temporary file and a rename.

  The temporary name (``.<name>.tmp-<pid>-<random>``) is unique per call, so
  threads and processes writing the same path never share one; it is removed
  if the write fails.
  """
  path = pathlib.Path(path)
  tmp = path.with_name(f'.{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}')
  try:
    with open(tmp, 'wb') as f:
      f.write(data.encode('utf-8') if isinstance(data, str) else data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  finally:
    tmp.unlink(missing_ok=True)
  fsync_dir(path.parent)
