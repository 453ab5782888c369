"""Raw rows from local jsonl / json / parquet files, each with its location.

Only parsing lives here; what a row must contain is checked in `loaders.py`.
Every row comes with a human-readable location ("line 12", "row 7") so bad
input can be reported by file, line and field. Bytes that are not UTF-8 do not
stop the read: they make their row a `DataError` naming the field that holds
them, so ``skip_malformed`` can skip and count it like any other bad row.
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Iterator

SUFFIXES = (".jsonl", ".json", ".parquet")
_SURROGATE = re.compile("[\ud800-\udfff]")


class DataError(ValueError):
  """A malformed data file or row; the message names file, line and field.

  ``reason`` is what skip counts are keyed by: the field, or ``<encoding>``
  for bytes that are not UTF-8.
  """

  def __init__(self, path, where: str, field: str, message: str, *, reason: str | None = None):
    super().__init__(f"{path}: {where}: field '{field}': {message}")
    self.path, self.where, self.field = str(path), where, field
    self.reason = reason or field


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
    rows = _jsonl(path, _read_text(path))
  elif suffix == ".json":
    rows = _json(path)
  elif suffix == ".parquet":
    rows = _parquet(path)
  else:
    raise DataError(path, "file", "<format>",
                    f"unknown suffix {path.suffix!r}; expected one of {SUFFIXES}")
  for where, row in rows:
    bad = None if isinstance(row, DataError) else _undecodable(row)
    yield where, (row if bad is None else _encoding_error(path, where, *bad))


def _read_text(path) -> str:
  # surrogateescape keeps each undecodable byte as U+DC80+byte, so one bad row
  # does not hide the rest of the file and the row's field can be named.
  return path.read_bytes().decode("utf-8-sig", errors="surrogateescape")


def _undecodable(value, field: str = "<row>") -> tuple[str, str] | None:
  """(field, the text) of the first string holding a lone surrogate: a byte that was not
  UTF-8, or a ``\\udcXX`` escape, which no tokenizer can encode either."""
  if isinstance(value, str):
    return (field, value) if _SURROGATE.search(value) else None
  if isinstance(value, dict):
    for key, v in value.items():
      bad = _undecodable(key, "<key>") or _undecodable(v, str(key))
      if bad:
        return (str(key), bad[1]) if bad[0] == "<key>" else bad
  elif isinstance(value, list):
    for v in value:
      bad = _undecodable(v, field)
      if bad:
        return bad
  return None


def _encoding_error(path, where: str, field: str, text: str) -> DataError:
  i = _SURROGATE.search(text).start()
  byte = ord(text[i]) - 0xDC00
  shown = text[max(0, i - 20):i].encode("utf-8", "replace").decode("utf-8")
  what = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else f"escape \\u{ord(text[i]):04x}"
  return DataError(path, where, field,
                   f"not valid UTF-8: {what} at character {i} (after {shown!r}); "
                   f"re-encode the file as UTF-8", reason="<encoding>")


def _jsonl(path, text: str, first_line: int = 1):
  # Only "\n" ends a line: str.splitlines would also split on U+2028 and
  # friends, which JSON allows raw inside a string.
  for lineno, line in enumerate(text.split("\n"), start=first_line):
    if not line.strip():
      continue
    where = f"line {lineno}"
    try:
      yield where, json.loads(line)
    except json.JSONDecodeError as e:
      extra = "; the line also holds bytes that are not UTF-8" if _SURROGATE.search(line) else ""
      yield where, DataError(path, where, "<json>", f"invalid JSON: {e.msg}{extra}")


def _json(path):
  """A JSON array of objects, an object holding one (e.g. {"data": [...]}),
  or JSON lines saved with a .json suffix (as `datasets.to_json` does)."""
  text = _read_text(path)
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
