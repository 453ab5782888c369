"""metrics.jsonl on disk: one JSON row per step, appended durably and repaired on resume.

The trainer writes (and fsyncs) a step's row before the checkpoint covering
that step commits, so after a kill the file holds every step the restored
checkpoint covers, and perhaps later ones, which the resumed run drops and
writes again. A kill in the middle of a write leaves a torn last line: readers
leave it out and `MetricsFile` removes it, each with a warning naming the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import time
from typing import Any, Mapping

from graft_jax.atomic_file import fsync_dir, write_atomically
from graft_jax.data.rows import DataError
from graft_jax.outputs import storage

log = logging.getLogger(__name__)


def parse_rows(path: pathlib.Path) -> tuple[list[tuple[dict[str, Any], str]], bool]:
  """``([(record, line), ...], torn)`` in file order; ``torn``: an unreadable last line was left out.

  Raises:
    DataError: a row other than the last is not a JSON object with an integer
      ``step`` (the file was edited or damaged; the message names the line).
  """
  # Rows are ASCII (json.dumps escapes the rest); only a torn tail can hold a
  # cut multi-byte sequence, and that tail is dropped anyway.
  lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
  numbered = [(i, line) for i, line in enumerate(lines, start=1) if line.strip()]
  rows, torn = [], False
  for k, (lineno, line) in enumerate(numbered):
    try:
      record = json.loads(line)
      if not (isinstance(record, dict) and isinstance(record.get("step"), int)):
        raise ValueError("not a JSON object with an integer 'step'")
    except ValueError as e:
      if k == len(numbered) - 1:
        torn = True
        break
      raise DataError(path, f"line {lineno}", "<json>",
                      f"not a metrics row ({e}); remove or repair the line to resume") from None
    rows.append((record, line + "\n"))
  return rows, torn


def scalars(record: Mapping[str, Any]) -> dict[str, int | float]:
  """The plottable entries of a flattened metrics row: numbers, without the wall time
  (null, a non-finite value, would plot as a broken point)."""
  return {k: v for k, v in record.items() if k != 'time' and isinstance(v, (int, float))}


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
  """Records of a metrics.jsonl, the last one per step (a resumed run rewrites
  the steps after its checkpoint), ordered by step. A torn last line is left
  out with a warning."""
  rows, torn = parse_rows(pathlib.Path(path))
  if torn:
    log.warning("%s: leaving out its last line, torn by an interrupted write", path)
  by_step = {record["step"]: record for record, _ in rows}
  return [by_step[s] for s in sorted(by_step)]


def repair(path: str | os.PathLike, *, first_step: int) -> list[tuple[dict[str, Any], str]]:
  """Drops a torn last line (with a warning) and the rows of steps >= ``first_step``, which
  an interrupted attempt wrote after the checkpoint a run resumes from; returns the rows kept.

  The file is rewritten atomically, and only when that changes it (a last row
  cut just before its newline is kept, and the newline restored, so the next
  row starts a line of its own).
  """
  path = pathlib.Path(path)
  if not path.exists():
    return []
  rows, torn = parse_rows(path)
  if torn:
    log.warning("%s: dropping its last line, torn by an interrupted write; that step "
                "is written again", path)
  kept = [(record, line) for record, line in rows if record["step"] < first_step]
  text = "".join(line for _, line in kept)
  if text.encode("utf-8") != path.read_bytes():
    try:
      write_atomically(path, text)
    except OSError as e:
      raise storage.as_storage_error(e, path) or e
  return kept


def missing_steps(rows, first_step: int) -> str:
  """The steps before ``first_step`` without a row, as '0-2, 5' ('' if none)."""
  missing = sorted(set(range(first_step)) - {record["step"] for record, _ in rows})
  return _ranges(missing) if missing else ""


class MetricsFile:
  """An append-only metrics.jsonl that keeps the rows of steps before ``first_step``.

  Every append goes straight to the file descriptor (no buffer that a later
  close could flush) and is fsynced; a failed append is cut back off, so the
  file never holds a row whose write raised. The rows stay in memory too, so a
  file deleted or replaced while the run writes is recreated whole (a
  replacement is moved aside, not overwritten), with a warning.
  """

  def __init__(self, path: str | os.PathLike, *, first_step: int):
    self.path = pathlib.Path(path)
    self._fd = None
    self._lines = [line for _, line in repair(self.path, first_step=first_step)]
    try:
      self._open()
    except OSError as e:
      raise storage.as_storage_error(e, self.path) or e

  def last_row(self) -> dict[str, Any] | None:
    """The last row kept from before (a resumed run's previous step), or None."""
    return json.loads(self._lines[-1]) if self._lines else None

  def _open(self) -> None:
    created = not self.path.exists()
    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    st = os.fstat(self._fd)
    self._identity = (st.st_dev, st.st_ino)
    if created:
      fsync_dir(self.path.parent)

  def _still_ours(self) -> bool:
    try:
      st = os.stat(self.path)
    except FileNotFoundError:
      return False
    return (st.st_dev, st.st_ino) == self._identity

  def _recreate(self) -> None:
    self._close_quietly()
    if self.path.exists():
      aside = self.path.with_name(f"{self.path.name}.replaced-{time.time_ns()}")
      os.replace(self.path, aside)
      log.warning("%s was replaced while the run wrote it; moved the replacement to %s and "
                  "recreated the file from the run's %d rows", self.path, aside.name,
                  len(self._lines))
    else:
      log.warning("%s was deleted while the run wrote it; recreated it from the run's %d rows",
                  self.path, len(self._lines))
    write_atomically(self.path, "".join(self._lines))
    self._open()

  def append(self, line: str) -> None:
    """Appends one row (ending in a newline) and makes it durable."""
    data = line.encode("utf-8")
    try:
      if not self._still_ours():
        self._recreate()
      size = os.fstat(self._fd).st_size
      try:
        while data:
          data = data[os.write(self._fd, data):]
        os.fsync(self._fd)
      except OSError:
        with contextlib.suppress(OSError):
          os.ftruncate(self._fd, size)
        raise
    except OSError as e:
      raise storage.as_storage_error(e, self.path) or e
    self._lines.append(line)

  def _close_quietly(self) -> None:
    if self._fd is not None:
      with contextlib.suppress(OSError):
        os.close(self._fd)
      self._fd = None

  def close(self) -> None:
    self._close_quietly()


def _ranges(steps: list[int]) -> str:
  """[0, 1, 2, 5] -> '0-2, 5'."""
  spans = [[steps[0], steps[0]]]
  for s in steps[1:]:
    if s == spans[-1][1] + 1:
      spans[-1][1] = s
    else:
      spans.append([s, s])
  return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)
