"""Raw rows from local jsonl / json / parquet files, each with its location.

Only parsing lives here; what a row must contain is checked in `loaders.py`.
Every row comes with a human-readable location ("line 12", "row 7") so bad
input can be reported by file, line and field.
"""

from __future__ import annotations

import json
import pathlib
from typing import Iterator

SUFFIXES = (".jsonl", ".json", ".parquet")


class DataError(ValueError):
  """A malformed data file or row; the message names file, line and field."""

  def __init__(self, path, where: str, field: str, message: str):
    super().__init__(f"{path}: {where}: field '{field}': {message}")
    self.path, self.where, self.field = str(path), where, field


def read_rows(path: str | pathlib.Path) -> Iterator[tuple[str, object]]:
  """Yields (location, row) for each row of the file; rows are not checked.

  A row that is not valid JSON is yielded as a `DataError` instead of a row,
  so the caller decides whether to raise or skip it.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"data file not found: {path}")
  suffix = path.suffix.lower()
  if suffix == ".jsonl":
    yield from _jsonl(path, path.read_text(encoding="utf-8"))
  elif suffix == ".json":
    yield from _json(path)
  elif suffix == ".parquet":
    yield from _parquet(path)
  else:
    raise DataError(path, "file", "<format>",
                    f"unknown suffix {path.suffix!r}; expected one of {SUFFIXES}")


def _jsonl(path, text: str, first_line: int = 1):
  for lineno, line in enumerate(text.splitlines(), start=first_line):
    if not line.strip():
      continue
    where = f"line {lineno}"
    try:
      yield where, json.loads(line)
    except json.JSONDecodeError as e:
      yield where, DataError(path, where, "<json>", f"invalid JSON: {e.msg}")


def _json(path):
  """A JSON array of objects, an object holding one (e.g. {"data": [...]}),
  or JSON lines saved with a .json suffix (as `datasets.to_json` does)."""
  text = path.read_text(encoding="utf-8")
  start = len(text) - len(text.lstrip())
  if text[start:start + 1] == "{":
    try:
      doc = json.loads(text)
    except json.JSONDecodeError:
      yield from _jsonl(path, text)  # several objects: JSON lines
      return
    lists = [k for k, v in doc.items() if isinstance(v, list)]
    if len(lists) != 1:
      raise DataError(path, "line 1", "<top level>",
                      f"a JSON object file needs exactly one list of rows, "
                      f"found list fields {lists}")
    for i, row in enumerate(doc[lists[0]], start=1):
      yield f"row {i} of '{lists[0]}'", row
    return
  if text[start:start + 1] != "[":
    raise DataError(path, "line 1", "<top level>",
                    "expected a JSON array of rows, an object, or JSON lines")
  yield from _json_array(path, text, start + 1)


def _json_array(path, text: str, pos: int):
  # Decode element by element to know the line each row starts on.
  decoder = json.JSONDecoder()
  n, line, counted_to = len(text), 1, 0
  while True:
    while pos < n and text[pos] in " \t\r\n,":
      pos += 1
    line += text.count("\n", counted_to, pos)  # incremental: O(file size)
    counted_to = pos
    if pos >= n:
      raise DataError(path, f"line {line}", "<json>", "unterminated JSON array")
    if text[pos] == "]":
      return
    where = f"line {line}"
    try:
      row, pos = decoder.raw_decode(text, pos)
    except json.JSONDecodeError as e:
      raise DataError(path, f"line {e.lineno}", "<json>",
                      f"invalid JSON: {e.msg}") from None
    yield where, row


def _parquet(path):
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  table = pq.read_table(path)
  for i, row in enumerate(table.to_pylist(), start=1):
    yield f"row {i}", row
