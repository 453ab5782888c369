"""A job of three step-counting tasks, two at a time in spawned workers, under
``graft_jax.experiments.job_signals`` (for its tests).

  python -m tests.experiments.job_child WORKDIR

Each task counts steps as a trainer does (``Trainer.run``): every 20 ms it
writes its step to ``WORKDIR/<label>.step``; at its first step after a stop
signal it writes ``<label>.saved`` and raises ``preemption.Stopped``. The job runs
under the launchers' console (``graft_jax.cli.guard``).

  python -m tests.experiments.job_child WORKDIR --threads-end-apart

runs one counting subprocess (``job_signals.subprocess_options``), whose save
takes 2 s, and then ends this driver's main thread and, 1 s later, the others:
Linux hands the subprocess to the other thread and sends it the parent-death
signal once per thread, as a driver killed under load can.
"""

import ctypes
import os
import pathlib
import platform
import subprocess
import sys
import threading
import time

from graft_jax import cli
from graft_jax.experiments import job_signals
from graft_jax import preemption

LABELS = ("a", "b", "c")
SYS_EXIT = {"x86_64": 60, "aarch64": 93}  # exit(2): the calling thread alone


def count(workdir: str, label: str, steps: int, save_s: float = 0.0) -> int:
  stop = job_signals.active()
  folder = pathlib.Path(workdir)
  (folder / f"{label}.pid").write_text(str(os.getpid()))
  for step in range(steps):
    if stop.signum:
      time.sleep(save_s)
      (folder / f"{label}.saved").write_text(str(step))
      raise preemption.Stopped(stop.signum, step)
    (folder / f"{label}.step").write_text(str(step))
    time.sleep(0.02)
  return steps


def threads_end_apart(workdir: str) -> None:
  if os.environ.get(job_signals.PARENT_ENV):  # the counting subprocess
    with job_signals.job_stop():
      job_signals.follow_driver_env()
      count(workdir, "w", 10 ** 6, save_s=2.0)
    return
  subprocess.Popen([sys.executable, "-m", "tests.experiments.job_child", workdir,
                    "--threads-end-apart"], **job_signals.subprocess_options())
  while not (pathlib.Path(workdir) / "w.step").exists():
    time.sleep(0.02)
  def end_the_rest():
    time.sleep(1.0)
    os._exit(0)  # every thread left, at once

  threading.Thread(target=end_the_rest).start()
  ctypes.CDLL(None).syscall(SYS_EXIT[platform.machine()], 0)


def main(argv) -> None:
  if argv[2:] == ["--threads-end-apart"]:
    threads_end_apart(argv[1])
    return
  tasks = {label: (count, (argv[1], label, 10 ** 6), {}) for label in LABELS}
  print(job_signals.run_tasks(tasks, jobs=2))


if __name__ == "__main__":
  cli.guard(main, sys.argv)
