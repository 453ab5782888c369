"""The scripts in benchmarks/ run as ``python benchmarks/<name>.py`` from any folder."""

import ast
import pathlib
import subprocess
import sys

from tests.launch.conftest import REPO

SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))


def imported_modules(tree: ast.AST) -> list[str]:
  """Top-level module names a file imports, in the order they appear."""
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
      out.append(node.module)
  return out


def test_a_script_that_imports_its_helpers_puts_the_root_on_the_path_first():
  for path in SCRIPTS:
    if path.name in ("__init__.py", "_path.py"):
      continue
    names = imported_modules(ast.parse(path.read_text()))
    helpers = [i for i, n in enumerate(names) if n.split(".")[0] == "benchmarks"]
    if helpers and path.name != "bench_peers.py":  # bench_peers is bench_vs_trl's module
      assert "_path" in names[:helpers[0]], path.name


def test_a_script_runs_from_another_folder(tmp_path):
  proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_peak.py"), "--help"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "--repeats" in proc.stdout
