"""The code version a benchmark cell records: the commit, '+edits' for edited code only,
and the RESULTS.md line that counts the cells per version."""

import subprocess

from benchmarks.toy import code_version


def _git(root, *args):
  subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_commit_and_edits_to_code_but_not_to_docs(tmp_path):
  assert code_version.current(tmp_path) == ""  # not a checkout
  (tmp_path / "graft_jax").mkdir()
  (tmp_path / "docs").mkdir()
  (tmp_path / "graft_jax" / "m.py").write_text("x = 1\n")
  (tmp_path / "docs" / "cells.json").write_text("{}\n")
  _git(tmp_path, "init", "-q")
  _git(tmp_path, "add", ".")
  _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, check=True,
                        capture_output=True, text=True).stdout.strip()
  assert code_version.current(tmp_path) == head[:12]
  (tmp_path / "docs" / "cells.json").unlink()  # the record changes as cells finish
  (tmp_path / "notes.txt").write_text("untracked\n")
  assert code_version.current(tmp_path) == head[:12]
  (tmp_path / "graft_jax" / "m.py").write_text("x = 2\n")
  assert code_version.current(tmp_path) == head[:12] + "+edits"


def test_summary_counts_cells_per_version():
  line = code_version.summary(["b" * 12, "a" * 12, "", "a" * 12])
  assert line == (f"Code the cells ran on: `{'a' * 12}` 2 cells; `{'b' * 12}` 1 cell; "
                  "not recorded 1 cell (recorded before cells kept it).")
