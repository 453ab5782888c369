"""MATH-format problem sets from local jsonl / json / parquet files.

Field names of the common releases are accepted (case-insensitive):
  problem text:  ``problem`` or ``question``
  gold answer:   ``answer`` (or ``final_answer``); else the last ``\\boxed{}``
                 of ``solution``
  optional:      ``solution``; ``family`` / ``subject`` / ``type`` -> family;
                 ``difficulty`` / ``level`` ("Level 3" or 3) -> difficulty
A malformed row (bytes that are not UTF-8 included) raises `DataError` naming
file, line and field, or, with ``skip_malformed=True``, is skipped and counted
in the returned `LoadStats`.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import pathlib
import re

from graft_jax.data.problem import Problem, stable_id
from graft_jax.data.rows import DataError, read_rows
from graft_jax.rewards.extract import last_boxed

_PROBLEM_KEYS = ("problem", "question")
_ANSWER_KEYS = ("answer", "final_answer")
_FAMILY_KEYS = ("family", "subject", "type")
_LEVEL = re.compile(r"(?:level\s*)?(\d+)", re.IGNORECASE)
_MAX_EXAMPLES = 5


@dataclasses.dataclass
class LoadStats:
  """What happened to the rows of one file."""
  path: str
  rows: int = 0
  loaded: int = 0
  skipped: dict[str, int] = dataclasses.field(default_factory=dict)  # by field, or <encoding>
  duplicates: int = 0  # repeated problem texts, kept with an id suffix
  examples: list[str] = dataclasses.field(default_factory=list)  # first errors

  @property
  def num_skipped(self) -> int:
    return sum(self.skipped.values())


def _get(row: dict, keys) -> tuple[str | None, object]:
  """(actual key, value) of the first of ``keys`` present; null counts as
  absent, since columnar files (parquet) store missing fields as null."""
  lowered = {str(k).lower(): k for k in row}
  for key in keys:
    if key in lowered and row[lowered[key]] is not None:
      return lowered[key], row[lowered[key]]
  return None, None


def _answer_text(value, path, where, field) -> str:
  if isinstance(value, list) and len(value) == 1:
    value = value[0]  # some releases wrap the answer in a list
  if isinstance(value, bool):
    raise DataError(path, where, field, f"expected a string or number, got {value!r}")
  if isinstance(value, int):
    return str(value)
  if isinstance(value, float):
    if not math.isfinite(value):
      raise DataError(path, where, field, f"not a finite number: {value!r}")
    return str(int(value)) if value.is_integer() else repr(value)
  if not isinstance(value, str):
    raise DataError(path, where, field,
                    f"expected a string or number, got {type(value).__name__}")
  if not value.strip():
    raise DataError(path, where, field, "empty answer")
  return value.strip()


def _row_to_problem(row, path, where, source: str) -> Problem:
  if isinstance(row, DataError):
    raise row
  if not isinstance(row, dict):
    raise DataError(path, where, "<row>",
                    f"expected an object, got {type(row).__name__}")
  key, text = _get(row, _PROBLEM_KEYS)
  if key is None:
    raise DataError(path, where, "problem",
                    f"missing; expected one of {_PROBLEM_KEYS}, got {sorted(row)}")
  if not isinstance(text, str) or not text.strip():
    raise DataError(path, where, key, f"expected non-empty text, got {text!r}")
  sol_key, solution = _get(row, ("solution",))
  if solution is not None and not isinstance(solution, str):
    raise DataError(path, where, sol_key, "expected text")
  ans_key, answer = _get(row, _ANSWER_KEYS)
  if ans_key is not None:
    answer = _answer_text(answer, path, where, ans_key)
  elif solution is not None:
    answer = last_boxed(solution)
    if answer is None or not answer.strip():
      raise DataError(path, where, sol_key,
                      "no 'answer' field and no \\boxed{...} answer in 'solution'")
    answer = answer.strip()
  else:
    raise DataError(path, where, "answer",
                    f"missing; expected one of {_ANSWER_KEYS} or a 'solution' "
                    f"with a \\boxed{{}} answer, got {sorted(row)}")
  _, family = _get(row, _FAMILY_KEYS)
  _, level = _get(row, ("difficulty", "level"))
  level_match = _LEVEL.fullmatch(str(level).strip()) if level is not None else None
  return Problem(id="", problem=text.strip(), answer=answer, source=source,
                 solution=solution,
                 family=family if isinstance(family, str) else None,
                 difficulty=int(level_match[1]) if level_match else None)


def load_problems(path: str | pathlib.Path, *, source: str | None = None,
                  skip_malformed: bool = False,
                  limit: int | None = None) -> tuple[list[Problem], LoadStats]:
  """Reads a MATH-format file.

  Args:
    path: a .jsonl, .json or .parquet file.
    source: the data set name used in ids; defaults to the file stem.
    skip_malformed: skip and count bad rows instead of raising `DataError`.
    limit: stop after this many loaded problems.

  Returns:
    ``(problems, stats)``. Ids are `stable_id(source, problem)`; the k-th
    repeat of a problem text in the file gets the suffix ``-k``.
  """
  source = source or pathlib.Path(path).stem
  stats = LoadStats(path=str(path))
  problems, seen = [], collections.Counter()
  for where, row in read_rows(path):
    if limit is not None and len(problems) >= limit:
      break
    stats.rows += 1
    try:
      p = _row_to_problem(row, path, where, source)
    except DataError as e:
      if not skip_malformed:
        raise
      stats.skipped[e.reason] = stats.skipped.get(e.reason, 0) + 1
      if len(stats.examples) < _MAX_EXAMPLES:
        stats.examples.append(str(e))
      continue
    seen[p.problem] += 1
    pid = stable_id(source, p.problem)
    if seen[p.problem] > 1:
      stats.duplicates += 1
      pid = f"{pid}-{seen[p.problem]}"
    problems.append(dataclasses.replace(p, id=pid))
  stats.loaded = len(problems)
  if stats.num_skipped:
    logging.warning("%s: skipped %d of %d rows (by reason: %s); first: %s",
                    path, stats.num_skipped, stats.rows, stats.skipped,
                    stats.examples[0])
  return problems, stats


def write_jsonl(problems, path: str | pathlib.Path) -> None:
  """Writes problems as MATH-format json lines (`load_problems` reads them)."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with path.open("w", encoding="utf-8") as f:
    for p in problems:
      f.write(json.dumps(p.to_row(), ensure_ascii=False) + "\n")
