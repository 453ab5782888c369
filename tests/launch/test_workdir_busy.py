"""launch/train.py on a workdir another trainer holds stops in one line naming the holder,
before any model loads and without writing anything there."""

import json
import os
import socket
import subprocess
import sys

from graft_jax.outputs.workdir_lock import WorkdirLock
from tests.launch.conftest import REPO


def test_a_held_workdir_is_refused_before_anything_loads(tmp_path):
  work = tmp_path / "w"
  lock = WorkdirLock(work).acquire()  # this process stands for the running trainer
  try:
    held = lock.path.read_text()
    proc = subprocess.run([sys.executable, "launch/train.py", "--config=configs/toy.py:graft",
                           f"--workdir={work}"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert (proc.returncode, proc.stdout + proc.stderr) == (2, (
        f"workdir busy error: {work} is in use by a trainer: pid {os.getpid()} on host "
        f"{socket.gethostname()}, started {json.loads(held)['started']}; wait for it to end, "
        f"stop it, or pass another --workdir\n"))
    assert sorted(p.name for p in work.iterdir()) == ["trainer.lock"]
    assert lock.path.read_text() == held
  finally:
    lock.release()
