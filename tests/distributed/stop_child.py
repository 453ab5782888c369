"""One of two processes joined by ``jax.distributed`` that loop over steps under
``preemption.StopSignals``, agreeing at the top of each step whether to stop.

  python -m tests.distributed.stop_child PROCESS_ID PORT OUT_DIR SIGNAL_AT

Only process 1 is signalled: it sends itself SIGTERM in the middle of step
SIGNAL_AT. Each step ends in a collective, as a training step does, so a
process that stopped alone would leave the other waiting there. Each process
writes ``OUT_DIR/<process>.json``: the step it stopped before and the signal
it agreed on.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys

import jax
import numpy as np

from graft_jax import distributed
from graft_jax import preemption
from graft_jax.config.run_config import DistributedConfig

STEPS = 50


def main(process_id: int, port: int, out: str, signal_at: int) -> None:
  jax.config.update("jax_num_cpu_devices", 1)
  assert distributed.initialize(DistributedConfig(f"localhost:{port}", 2, process_id))
  from jax.experimental import multihost_utils
  step = 0
  with preemption.StopSignals() as stop:
    while step < STEPS and not stop.agreed():
      if process_id == 1 and step == signal_at:
        os.kill(os.getpid(), signal.SIGTERM)
      multihost_utils.process_allgather(np.array([step], np.int32))  # the step's collectives
      step += 1
  pathlib.Path(out, f"{process_id}.json").write_text(
      json.dumps({"stopped_before": step, "agreed": stop.agreed_signum, "own": stop.signum}))


if __name__ == "__main__":
  main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
