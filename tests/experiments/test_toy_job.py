"""CI smoke test of the README's main job: the tiny pair, 2 steps per method; checks outputs, not
outcomes. Then the same job stopped by SIGTERM and run again ends as the uninterrupted one."""

import json
import pathlib
import subprocess
import sys

import pytest

from graft_jax import cli
from tests.experiments import job_processes

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  """(workdir, completed process) of the smoke job run once without interruption."""
  workdir = tmp_path_factory.mktemp("toy_main")
  proc = subprocess.run([sys.executable, "launch/toy_job.py", "--smoke", "--workdir", str(workdir)],
                        cwd=ROOT, capture_output=True, text=True, timeout=1800)
  return workdir, proc


def test_main_job_prints_the_table_and_writes_its_files(finished):
  tmp_path, proc = finished
  assert proc.returncode == 0, proc.stderr[-4000:]
  out = proc.stdout
  assert "updated model  peer" in out and "GRPO n=8" in out and "GRAFT" in out
  assert "Complementarity on held-out problems" in out
  assert "pass@1 (%) at T=1.0" in out and "at T=0.6, top-p 0.95" in out
  assert "Exchange under graft" in out
  assert (tmp_path / "learning_curves.png").stat().st_size > 1000
  results = json.loads((tmp_path / "results.json").read_text())
  assert set(results["runs"]) == {"grpo", "graft"}
  for run in results["runs"].values():
    assert [r["step"] for r in run["curve"]] == [0, 1]
    assert run["curve"][-1][f"{results['names'][0]}/eval"] is not None  # validated at the end
    for name in results["names"]:
      assert 0.0 <= run["evals"][name]["average"] <= 1.0
      assert run["evals"][name]["average"] == run["evals"][name]["t1"]["average"]
  # What outside checks read: held-out pass@1 in percent at T=1 per model and method.
  assert set(results["summary"]) == set(results["names"])
  for name, per_method in results["summary"].items():
    assert set(per_method) == {"initial", "grpo", "graft"}
    assert per_method["grpo"] == 100 * results["runs"]["grpo"]["evals"][name]["t1"]["average"]
    assert all(0.0 <= v <= 100.0 for v in per_method.values())
  for method in ("grpo", "graft"):
    assert (tmp_path / method / "metrics.jsonl").is_file()
    assert any((tmp_path / method / "peer_logs").iterdir())


# Where the driver is signalled: once its workers exist, once a run has a metrics row, or
# once a run has saved its last step (its evaluation under way).
STOP_POINTS = ("workers", "first_row", "trained")


def _reached(point: str, workdir: pathlib.Path, seen: dict) -> bool:
  runs = [workdir / m for m in ("grpo", "graft")]
  if point == "workers":
    return len(seen) >= 2
  if point == "first_row":
    return any((r / "metrics.jsonl").is_file() and (r / "metrics.jsonl").read_text().strip()
               for r in runs)
  return any(list((r / "checkpoints").glob("2/commit_success.txt")) for r in runs)


def _compared(results: dict) -> dict:
  """What a resumed job must reproduce: held-out scores and per-step curves, not timings."""
  return {"summary": results["summary"], "summary_t06": results["summary_t06"],
          "initial": results["initial"],
          "runs": {k: {"evals": r["evals"], "curve": r["curve"]}
                   for k, r in results["runs"].items()}}


@pytest.mark.parametrize("everyone", [False, True], ids=["to the driver", "to every process"])
def test_a_signal_stops_the_job_and_every_process_and_the_same_command_resumes(finished,
                                                                              tmp_path, everyone):
  """Sent to the driver, or to every process as ``scancel``, a systemd or a container stop
  sends it: then each worker gets the stop directly and from its driver, one stop, and
  still saves. (A worker still importing has no handler yet: ``everyone`` starts once a run
  trains.)"""
  ref, first = finished
  assert first.returncode == 0, first.stderr[-4000:]
  point = job_processes.draw(STOP_POINTS[1:] if everyone else STOP_POINTS)
  work = tmp_path / "cut"
  argv = [sys.executable, "launch/toy_job.py", "--smoke", "--jobs", "2", "--workdir", str(work),
          "--pair-root", str(ref / "toy_pair")]
  code, err, seen = job_processes.stopped_at(argv, ROOT, lambda seen: _reached(point, work, seen),
                                             tmp_path / "err.log", everyone=everyone)
  assert code == cli.STOPPED_EXIT, (point, err[-4000:])
  last = err.splitlines()[-1]
  assert last.startswith("stopped by SIGTERM: "), (point, err[-4000:])
  assert last.endswith("the same command resumes and reuses the finished ones")
  assert "Traceback" not in err and "second SIGTERM" not in err, (point, err[-4000:])
  if point == "first_row":  # a run trains: it saved its step in flight
    assert "saved after step" in last, (point, last)
  assert not (work / "results.json").exists()  # nothing written as final
  job_processes.wait_for(lambda: not job_processes.running(seen), "no process of the job left",
                         timeout_s=60)

  again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800)
  assert again.returncode == 0, again.stderr[-4000:]
  got = json.loads((work / "results.json").read_text())
  want = json.loads((ref / "results.json").read_text())
  assert _compared(got) == _compared(want)

