"""The problem record shared by loaders, synthetic tasks, training and eval."""

from __future__ import annotations

import dataclasses
import hashlib


def stable_id(source: str, problem: str) -> str:
  """16 hex chars of sha1(source + NUL + problem text).

  The same problem text in the same source always gets the same id, across
  runs, machines and file orders; loaders disambiguate repeats in one file.
  """
  return hashlib.sha1(f"{source}\0{problem}".encode("utf-8")).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Problem:
  """One verifiable problem.

  Attributes:
    id: stable id (see `stable_id`).
    problem: the question text, without any prompt template.
    answer: the gold final answer, bare (``3/4``, ``\\frac{3}{4}``, ``(1,2]``).
    source: the benchmark or data set name (``MATH500``, ``synthetic``).
    solution: a worked solution ending in ``\\boxed{answer}``, if known.
    family: the synthetic task family or the data set's subject, if known.
    difficulty: the synthetic difficulty or the data set's level, if known.
  """

  id: str
  problem: str
  answer: str
  source: str
  solution: str | None = None
  family: str | None = None
  difficulty: int | None = None

  def to_row(self) -> dict:
    """A MATH-format json row (the loaders read it back unchanged)."""
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
