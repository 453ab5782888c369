"""A job of spawned workers stops as one trainer does: the signal reaches every worker, each
saves, the driver prints one line and exits 75, and no process outlives the job, even when
the driver is killed outright (``graft_jax.experiments.job_signals``, run through
``tests/experiments/job_child``)."""

import os
import pathlib
import platform
import signal
import subprocess
import sys

import pytest

from graft_jax import cli
from tests.experiments import job_child, job_processes

pytestmark = pytest.mark.slow  # each starts Python three times, JAX imported
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _start(workdir: pathlib.Path):
  workdir.mkdir()
  return subprocess.Popen([sys.executable, "-m", "tests.experiments.job_child", str(workdir)],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))


def _end(proc, seen: dict) -> tuple[int, str]:
  try:
    _, err = proc.communicate(timeout=300)
  finally:
    if proc.poll() is None:
      proc.kill()
  job_processes.wait_for(lambda: not job_processes.running(seen), "the workers to end",
                         timeout_s=60)
  return proc.returncode, err


@pytest.mark.parametrize("everyone", [False, True], ids=["to the driver", "to every process"])
def test_a_signal_reaches_every_worker_which_saves_and_the_job_exits_75(tmp_path, everyone):
  """Sent to the driver, or to every process (``scancel``, a systemd or a container stop):
  each worker then gets it directly and again from its driver, one stop, and still saves."""
  proc, seen = _start(tmp_path / "job"), {}
  job = tmp_path / "job"
  job_processes.wait_for(lambda: (job / "a.step").exists() and (job / "b.step").exists(),
                         "both workers to count", proc, seen=seen, root=proc.pid)
  assert len(seen) >= 2
  if everyone:
    assert len(job_processes.signal_every_process(proc.pid, seen)) >= 3
  else:
    os.kill(proc.pid, signal.SIGTERM)
  code, err = _end(proc, seen)
  assert code == cli.STOPPED_EXIT, err[-3000:]
  saved = {x: int((job / f"{x}.saved").read_text()) for x in ("a", "b")}
  assert err.splitlines()[-1] == (
      f"stopped by SIGTERM: a saved after step {saved['a']}, b saved after step {saved['b']}, "
      "c not started; 0 finished; the same command resumes and reuses the finished ones")
  assert "Traceback" not in err and "second SIGTERM" not in err
  assert not (job / "c.pid").exists()


def test_a_signal_while_the_workers_start_stops_the_job_without_a_broken_pool(tmp_path):
  """Workers still importing have no handler yet: they get the stop when they are ready."""
  proc, seen = _start(tmp_path / "job"), {}
  job_processes.wait_for(lambda: job_processes.add_descendants(proc.pid, {}), "a worker",
                         proc, seen=seen, root=proc.pid)
  os.kill(proc.pid, signal.SIGTERM)
  code, err = _end(proc, seen)
  assert code == cli.STOPPED_EXIT, err[-3000:]
  assert err.splitlines()[-1].startswith("stopped by SIGTERM: a ")
  assert "Traceback" not in err and "BrokenProcessPool" not in err


def test_workers_of_a_killed_driver_save_and_end(tmp_path):
  proc, seen = _start(tmp_path / "job"), {}
  job = tmp_path / "job"
  job_processes.wait_for(lambda: (job / "a.step").exists() and (job / "b.step").exists(),
                         "both workers to count", proc, seen=seen, root=proc.pid)
  os.kill(proc.pid, signal.SIGKILL)
  code, _ = _end(proc, seen)
  assert code == -signal.SIGKILL
  # The parent-death signal stops each at its next step, as a stop signal does.
  assert (job / "a.saved").exists() and (job / "b.saved").exists()


@pytest.mark.skipif(platform.machine() not in job_child.SYS_EXIT, reason="exit(2) number")
def test_a_worker_saves_when_the_parent_death_signal_comes_twice(tmp_path):
  """Linux sends the parent-death signal each time a worker passes to another thread of its
  dying driver; a second one that arrives during the save must not end it unsaved."""
  job = tmp_path / "job"
  job.mkdir()
  proc, seen = subprocess.Popen(
      [sys.executable, "-m", "tests.experiments.job_child", str(job), "--threads-end-apart"],
      cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu")), {}
  job_processes.wait_for(lambda: (job / "w.step").exists(), "the worker to count", proc,
                         seen=seen, root=proc.pid)
  assert proc.wait(timeout=300) == 0
  job_processes.wait_for(lambda: not job_processes.running(seen), "the worker to end",
                         timeout_s=60)
  assert (job / "w.saved").exists()

