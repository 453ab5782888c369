"""`launch/train.py --config.mesh.*` builds that mesh and trains on it (fake CPU devices)."""

import re
import subprocess
import sys

import pytest

from graft_jax.outputs import metrics_writer as metrics
from tests.launch.conftest import REPO, real_pair_files  # noqa: F401  (the fixture)
from tests.launch.test_real_pair_example import SMALL
from tests import fake_devices

pytestmark = pytest.mark.slow  # one launcher run: two tiny models compiled on a mesh


def test_launcher_honours_the_mesh_flags(real_pair_files, tmp_path):  # noqa: F811
  """Over 4 devices: under XLA's CPU runtime a fake device's collective can wait on a
  thread the others hold, and with 8 devices in pairs on a few cores a whole step
  once waited out the 600 s rendezvous limit."""
  work = tmp_path / "run"
  f = real_pair_files
  args = [sys.executable, "launch/train.py", "--config=configs/pair_smollm3_qwen3.py:graft",
          f"--config.model_a.path={f['smollm3']}", f"--config.model_b.path={f['qwen3']}",
          f"--config.data.train_path={f['train']}", f"--config.eval.data_dir={f['eval']}",
          "--config.mesh.data=2", "--config.mesh.fsdp=2", "--config.mesh.tensor=1",
          "--config.perf.micro_batch_tokens=64", "--config.eval.every_steps=0",
          *[a for a in SMALL if not a.startswith("--steps")], "--steps=1", f"--workdir={work}"]
  env = fake_devices.env(4)
  proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  out = proc.stdout + proc.stderr
  assert proc.returncode == 0, out[-3000:]
  assert "mesh data=2 x fsdp=2 x tensor=1 over 4 cpu devices" in out
  assert re.search(r"smollm3_3b: params [\d.]+ \w+ \+ optimizer state [\d.]+ \w+ per device", out)
  assert [r["step"] for r in metrics.read_jsonl(work / "metrics.jsonl")] == [0]


def test_a_mesh_the_devices_cannot_fill_fails_before_models_load(real_pair_files, tmp_path):  # noqa: F811
  f = real_pair_files
  args = [sys.executable, "launch/train.py", "--config=configs/pair_smollm3_qwen3.py:graft",
          f"--config.model_a.path={f['smollm3']}", f"--config.model_b.path={f['qwen3']}",
          f"--config.data.train_path={f['train']}", f"--config.eval.data_dir={f['eval']}",
          "--config.mesh.data=3", "--config.mesh.fsdp=1", *SMALL, f"--workdir={tmp_path}/run"]
  env = fake_devices.env(8)
  proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0
  assert "mesh" in proc.stderr.strip().splitlines()[-1]
  assert "8" in proc.stderr.strip().splitlines()[-1]
