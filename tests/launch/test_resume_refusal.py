"""launch/train.py refuses to resume a checkpointed run under a config that changes the math,
in one line naming the field, both values and the flag, before any model loads."""

import json
import subprocess
import sys

import numpy as np

from graft_jax.config import run_config as config_lib
from graft_jax.outputs.checkpoint import Checkpointer
from tests.launch.conftest import REPO


def test_a_changed_lr_is_refused_before_anything_loads(tmp_path):
  work = tmp_path / "w"
  cd = config_lib.load_config(str(REPO / "configs" / "toy.py") + ":graft")
  with cd.unlocked():
    cd.workdir = str(work)
  cfg = config_lib.from_config_dict(cd)
  config_lib.write_run_config(cfg)  # what the first launch wrote
  with Checkpointer(cfg.checkpoint_dir, every_steps=1, keep=1, async_save=False) as ckpt:
    ckpt.save(3, {"w": np.zeros(2, np.float32)}, {"step": 3})  # a committed step
  stored = (work / "config.json").read_text()
  proc = subprocess.run([sys.executable, "launch/train.py", "--config=configs/toy.py:graft",
                         f"--workdir={work}", "--config.optimizer.lr=3e-4"],
                        cwd=REPO, capture_output=True, text=True, timeout=300)
  assert (proc.returncode, proc.stdout + proc.stderr) == (2, (
      f"config error: optimizer.lr is 0.0003 but the checkpointed run in {work}/config.json has "
      f"0.0001; a resumed run keeps every field that changes the math (use another workdir, or "
      f"checkpoint.resume=False to start over) (from --config.optimizer.lr=0.0003)\n"))
  assert (work / "config.json").read_text() == stored
  assert not (work / "metrics.jsonl").exists()
  assert json.loads(stored)["optimizer"]["lr"] == 1e-4
