"""Benchmark suites: named local files, loaded together for evaluation.

A suite is an ordered mapping name -> path (see `configs/benchmarks.py` for
the paper's five). Every path is checked before anything is read, and all
missing files are named in one error.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Mapping

from graft_jax.data.loaders import LoadStats, load_problems
from graft_jax.data.problem import Problem

PAPER_BENCHMARKS = ("MATH500", "AIME24", "AIME25", "AMC23", "Minerva")


def ordered(suite: Mapping[str, str]) -> dict[str, str]:
  """The paper's benchmarks first, in the paper's order, then the rest by name.

  (ml_collections sorts keys, so a config's order is not the paper's.)
  """
  rank = {name: i for i, name in enumerate(PAPER_BENCHMARKS)}
  names = sorted(suite, key=lambda n: (rank.get(n, len(rank)), n))
  return {name: suite[name] for name in names}


def check_suite_files(suite: Mapping[str, str]) -> None:
  """Raises FileNotFoundError naming every benchmark whose file is missing."""
  if not suite:
    raise ValueError("benchmark suite is empty")
  missing = [(name, str(path)) for name, path in suite.items()
             if not pathlib.Path(path).is_file()]
  if missing:
    lines = "\n".join(f"  {name}: {path}" for name, path in missing)
    raise FileNotFoundError(
        f"{len(missing)} benchmark file(s) not found:\n{lines}\n"
        "Point the suite at local MATH-format .jsonl/.json/.parquet files, e.g. "
        "--config=configs/benchmarks.py:/path/to/dir or "
        "--config.benchmarks.MATH500=/path/to/math500.jsonl")


def load_suite(suite: Mapping[str, str], *, skip_malformed: bool = False,
               limit: int | None = None
               ) -> tuple[dict[str, list[Problem]], dict[str, LoadStats]]:
  """Loads every benchmark of ``suite`` (name -> path), in order.

  The benchmark name is the problems' ``source`` (so ids are stable per
  benchmark, whatever the file is called).
  """
  check_suite_files(suite)
  problems, stats = {}, {}
  for name, path in suite.items():
    problems[name], stats[name] = load_problems(
        path, source=name, skip_malformed=skip_malformed, limit=limit)
    if not problems[name]:
      raise ValueError(f"benchmark {name}: no problems loaded from {path}")
    logging.info("benchmark %s: %d problems from %s", name,
                 len(problems[name]), path)
  return problems, stats
