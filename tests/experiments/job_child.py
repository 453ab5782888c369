"""A job of three step-counting tasks, two at a time in spawned workers, under
``graft_jax.experiments.job_signals`` (for its tests).

  python -m tests.experiments.job_child WORKDIR

Each task counts steps as a trainer does (``Trainer.run``): every 20 ms it
writes its step to ``WORKDIR/<label>.step``; at its first step after a stop
signal it writes ``<label>.saved`` and raises ``preemption.Stopped``. The job runs
under the launchers' console (``graft_jax.cli.guard``).
"""

import os
import pathlib
import sys
import time

from graft_jax import cli
from graft_jax.experiments import job_signals
from graft_jax.train import preemption

LABELS = ("a", "b", "c")


def count(workdir: str, label: str, steps: int) -> int:
  stop = job_signals.active()
  folder = pathlib.Path(workdir)
  (folder / f"{label}.pid").write_text(str(os.getpid()))
  for step in range(steps):
    if stop.signum:
      (folder / f"{label}.saved").write_text(str(step))
      raise preemption.Stopped(stop.signum, step)
    (folder / f"{label}.step").write_text(str(step))
    time.sleep(0.02)
  return steps


def main(argv) -> None:
  tasks = {label: (count, (argv[1], label, 10 ** 6), {}) for label in LABELS}
  print(job_signals.run_tasks(tasks, jobs=2))


if __name__ == "__main__":
  cli.guard(main, sys.argv)
