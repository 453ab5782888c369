"""The commit a benchmark cell's code was at, recorded with the cell so that RESULTS.md
can say which code every number of a table came from."""

from __future__ import annotations

import collections
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
# The folders whose contents change what a cell computes (the record and the docs do not).
CODE_DIRS = ("graft_jax", "benchmarks", "launch", "configs")


def current(root=REPO) -> str:
  """``<12-hex commit>``, with ``+edits`` where a tracked file of `CODE_DIRS` differs from
  it; "" outside a git checkout."""
  try:
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()
    edited = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *CODE_DIRS], cwd=root,
                            capture_output=True).returncode != 0
  except (OSError, subprocess.CalledProcessError):
    return ""
  return head + ("+edits" if edited else "")


def summary(codes) -> str:
  """One line for RESULTS.md: how many cells ran on each code version (a cell recorded
  before versions were kept counts as 'not recorded')."""
  counts = collections.Counter(codes)
  parts = [f"`{c}` {n} cell{'s' * (n != 1)}" for c, n in sorted(counts.items()) if c]
  if counts[""]:
    n = counts[""]
    parts.append(f"not recorded {n} cell{'s' * (n != 1)} (recorded before cells kept it)")
  return "Code the cells ran on: " + "; ".join(parts) + "."
