"""The toy benchmark's tables from its record alone: the cells kept in the repository, no training.

A change to how the tables are computed (the cost columns, the sign table's
test) is applied to finished benchmarks by reading their recorded cells
(``toy_benchmark.record_path``) instead of running them again. Whether a
recorded cell still holds for the current code is not judged here: a cell is
rerun by removing its record and running the benchmark.
"""

from __future__ import annotations

import json
import pathlib

from benchmarks.toy import benchmark as tb


def recorded_seeds(record_dir) -> list[int]:
  """The seeds with a folder in ``record_dir`` (``s<seed>/``), in order."""
  return sorted(int(p.name[1:]) for p in pathlib.Path(record_dir).glob("s*")
                if p.is_dir() and p.name[1:].isdigit())


def load(record_dir, seeds=None, methods=None) -> tuple[list, dict]:
  """``(cells, results)``: the benchmark's plan over ``seeds`` (default: every recorded one)
  and the result of every planned cell that has a record."""
  seeds = recorded_seeds(record_dir) if seeds is None else seeds
  cells = tb.plan_cells(seeds, methods)
  results = {}
  for cell in cells:
    path = tb.record_path(cell, record_dir)
    if path.exists():
      results[cell.slug] = json.loads(path.read_text())
  return cells, results


def aggregate(record_dir, seeds=None, methods=None) -> dict:
  """``toy_benchmark.aggregate`` of the recorded cells; the models, step budget and eval k
  are read from them and must agree across cells."""
  cells, results = load(record_dir, seeds, methods)
  if not results:
    raise ValueError(f"{record_dir}: no recorded cell")
  budgets = {(r["steps"], r["eval_k"]) for r in results.values()}
  if len(budgets) != 1:
    raise ValueError(f"{record_dir}: cells of different steps / eval_k {sorted(budgets)}")
  (steps, eval_k), = budgets
  names = list(next(iter(results.values()))["pass1"])
  for r in results.values():  # replay cells hold one model each
    names += [n for n in r["pass1"] if n not in names]
  return tb.aggregate(cells, results, names, steps=steps, eval_k=eval_k)
