"""One trainer per workdir: a live holder refuses the next in one line naming it; a holder
killed with -9 (or an earlier attempt of the same SLURM job) is taken over with a warning."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys

import pytest

from graft_jax.outputs import workdir_lock
from graft_jax.outputs.workdir_lock import LOCK_NAME, WorkdirBusyError, WorkdirLock

ROOT = pathlib.Path(__file__).resolve().parents[2]

HOLD = ("import sys, time\n"
        "from graft_jax.outputs import workdir_lock\n"
        "workdir_lock.WorkdirLock(sys.argv[1]).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n")


@pytest.fixture
def holder(tmp_path):
  """A live process holding the lock on ``tmp_path / 'w'``."""
  proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "w")], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True)
  try:
    assert proc.stdout.readline() == "held\n"
    yield proc
  finally:
    if proc.poll() is None:
      os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _holder_file(tmp_path, **fields):
  (tmp_path / "w").mkdir()
  record = {"pid": 4194304, "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00"}
  record.update(fields)
  (tmp_path / "w" / LOCK_NAME).write_text(json.dumps(record) + "\n")
  return record


def test_a_live_holder_refuses_the_next_in_one_line_naming_it(tmp_path, holder):
  path = tmp_path / "w" / LOCK_NAME
  held = path.read_text()
  record = json.loads(held)
  assert (record["pid"], record["host"]) == (holder.pid, socket.gethostname())
  with pytest.raises(WorkdirBusyError) as e:
    WorkdirLock(tmp_path / "w").acquire()
  assert str(e.value) == (f"{tmp_path / 'w'} is in use by a trainer: pid {holder.pid} on host "
                          f"{socket.gethostname()}, started {record['started']}; wait for it to "
                          f"end, stop it, or pass another --workdir")
  assert path.read_text() == held


def test_a_holder_killed_with_sigkill_is_taken_over_with_a_warning(tmp_path, holder, caplog):
  os.kill(holder.pid, signal.SIGKILL)
  holder.wait()
  dead = json.loads((tmp_path / "w" / LOCK_NAME).read_text())
  lock = WorkdirLock(tmp_path / "w").acquire()
  assert json.loads(lock.path.read_text())["pid"] == os.getpid()
  assert caplog.messages == [f"{lock.path}: taking over the lock of pid {dead['pid']} on host "
                             f"{socket.gethostname()}, started {dead['started']}, which is no "
                             f"longer running"]
  lock.release()
  assert not lock.path.exists()
  with workdir_lock.held(tmp_path / "w"):  # free again; released on the way out
    assert lock.path.exists()
  assert not lock.path.exists()


def test_a_dead_pid_without_flock_on_this_host_is_taken_over(tmp_path):
  _holder_file(tmp_path)  # pid 4194304 exceeds Linux's pid_max: never alive
  lock = WorkdirLock(tmp_path / "w")
  assert lock._stale(json.loads(lock.path.read_text()), flocked=False)
  lock.acquire().release()


def test_another_hosts_lock_is_kept_unless_an_earlier_attempt_of_this_slurm_job(tmp_path,
                                                                            monkeypatch):
  _holder_file(tmp_path, host="other-node", slurm_job_id="77", slurm_restart_count=0)
  with pytest.raises(WorkdirBusyError, match=(
      f"in use by a trainer: pid 4194304 on host other-node, .*; if it no longer runs on "
      f"other-node, delete {tmp_path / 'w' / LOCK_NAME}$")):
    WorkdirLock(tmp_path / "w").acquire()
  monkeypatch.setenv("SLURM_JOB_ID", "77")
  monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # the same attempt: it may still be running
  with pytest.raises(WorkdirBusyError):
    WorkdirLock(tmp_path / "w").acquire()
  monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # requeued: SLURM ended attempt 0 first
  lock = WorkdirLock(tmp_path / "w").acquire()
  assert json.loads(lock.path.read_text())["slurm_restart_count"] == 1
  lock.release()
