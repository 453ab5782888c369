"""The toy benchmark stopped by SIGTERM, its cells in process or in subprocesses and the
signal sent to every process as ``scancel`` sends it: no cell failed, nothing final
written, exit 75, no process left; the same command then ends as an uninterrupted run."""

import json
import pathlib
import subprocess
import sys

import pytest

from graft_jax import cli
from tests.experiments import job_processes

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[3]
# Where it is signalled: once the graft cell has a metrics row, once the initial cell is
# done, or once the graft cell has saved its last step (its evaluation under way).
STOP_POINTS = ("first_row", "initial_done", "trained")
# What a resumed cell must reproduce: held-out scores, exchange figures, curve; not timings.
COMPARED = ("pass1", "pass1_t06", "pass1_groups", "diagnostics", "curve", "steps", "eval_k")


def _argv(out: pathlib.Path, jobs: int = 1) -> list[str]:
  return [sys.executable, "launch/toy_benchmark.py", "--smoke", "--seeds", "0", "--steps", "2",
          "--eval-k", "1", "--jobs", str(jobs), "--only", "GRAFT", "--out", str(out),
          "--results", str(out / "RESULTS.md"), "--figure", str(out / "curves.png")]


def _reached(point: str, out: pathlib.Path) -> bool:
  graft = out / "s0" / "graft"
  if point == "first_row":
    return (graft / "metrics.jsonl").is_file() and bool((graft / "metrics.jsonl").read_text())
  if point == "initial_done":
    return (out / "s0" / "initial" / "cell.json").is_file()
  return bool(list((graft / "checkpoints").glob("2/commit_success.txt")))


def _cell(out: pathlib.Path, cell: str) -> dict:
  res = json.loads((out / "s0" / cell / "cell.json").read_text())
  return {k: res[k] for k in COMPARED}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The output folder of an uninterrupted run."""
  ref = tmp_path_factory.mktemp("toy_benchmark_ref")
  done = subprocess.run(_argv(ref), cwd=ROOT, capture_output=True, text=True, timeout=1800)
  assert done.returncode == 0, done.stderr[-4000:]
  return ref


@pytest.mark.parametrize("jobs,everyone", [(1, False), (2, True)],
                         ids=["in process", "subprocesses, every process signalled"])
def test_a_signal_stops_the_benchmark_and_the_same_command_resumes(reference, tmp_path, jobs,
                                                                   everyone):
  ref = reference
  point = job_processes.draw(STOP_POINTS)
  out = tmp_path / "cut"
  code, err, seen = job_processes.stopped_at(_argv(out, jobs), ROOT,
                                             lambda _: _reached(point, out),
                                             tmp_path / "err.log", everyone=everyone)
  assert code == cli.STOPPED_EXIT, (point, err[-4000:])
  last = err.splitlines()[-1]
  assert last.startswith("stopped by SIGTERM: ") and "failed" not in err, (point, err[-4000:])
  assert "second SIGTERM" not in err, (point, err[-4000:])  # the copies were one stop
  assert last.endswith("the same command resumes and reuses the finished ones")
  assert not (out / "benchmark.json").exists() and not (out / "RESULTS.md").exists()
  job_processes.wait_for(lambda: not job_processes.running(seen), "no process of the job left",
                         timeout_s=60)

  again = subprocess.run(_argv(out, jobs), cwd=ROOT, capture_output=True, text=True, timeout=1800)
  assert again.returncode == 0, again.stderr[-4000:]
  for cell in ("initial", "graft"):
    assert _cell(out, cell) == _cell(ref, cell), cell
  assert (out / "benchmark.json").is_file() and (out / "RESULTS.md").is_file()
