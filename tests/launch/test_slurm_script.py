"""launch/slurm/train_pair.sbatch under stand-ins for srun and scontrol: it finds the repository
from SLURM_SUBMIT_DIR or GRAFT_REPO, forwards the time-limit warning (USR1) to the tasks and
requeues the job once they saved and stopped (exit 75), and does not requeue on SIGTERM."""

import os
import pathlib
import signal
import subprocess
import time

import pytest

from graft_jax import cli
from tests.launch.conftest import REPO

SCRIPT = REPO / "launch" / "slurm" / "train_pair.sbatch"
# The tasks as the trainer behaves: a stop signal ends them with 75 after a moment.
SRUN = """#!/bin/bash
printf '%s\\n' "$PWD" "$@" > "$FAKE_DIR/srun.args"
stop() { echo "$1" >> "$FAKE_DIR/srun.signals"; sleep 0.2; exit 75; }
trap 'stop USR1' USR1
trap 'stop TERM' TERM
touch "$FAKE_DIR/ready"
for _ in $(seq "${FAKE_SRUN_TICKS:-200}"); do sleep 0.05; done
exit "${FAKE_SRUN_EXIT:-0}"
"""
SCONTROL = """#!/bin/bash
if [[ $1 == show ]]; then echo node7; echo node8; else echo "$@" >> "$FAKE_DIR/scontrol.log"; fi
"""


@pytest.fixture
def fake_slurm(tmp_path):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)
  return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_DIR=str(tmp_path),
              SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="node[7-8]", SLURM_NNODES="2",
              SLURM_SUBMIT_DIR=str(REPO))


def _submit(env, cwd, send=None):
  """Runs the script from ``cwd`` (SLURM runs a copy elsewhere); sends ``send`` to the batch
  shell once the tasks run. Returns (exit code, output)."""
  copy = pathlib.Path(env["FAKE_DIR"], "slurm_script")
  copy.write_text(SCRIPT.read_text())
  proc = subprocess.Popen(["bash", str(copy), "configs/pair.py:graft", "--config.mesh.data=2"],
                          cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  ready = pathlib.Path(env["FAKE_DIR"], "ready")
  if send is not None:
    deadline = time.monotonic() + 30
    while not ready.exists():
      assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
      time.sleep(0.02)
    os.kill(proc.pid, send)
  out, _ = proc.communicate(timeout=60)
  return proc.returncode, out


def _read(env, name):
  path = pathlib.Path(env["FAKE_DIR"], name)
  return path.read_text().splitlines() if path.exists() else []


def test_the_time_limit_warning_is_forwarded_and_the_job_requeued(fake_slurm, tmp_path):
  code, out = _submit(fake_slurm, tmp_path, send=signal.SIGUSR1)
  assert code == cli.STOPPED_EXIT, out
  assert _read(fake_slurm, "srun.signals") == ["USR1"]
  assert _read(fake_slurm, "scontrol.log") == ["requeue 4242"]
  args = _read(fake_slurm, "srun.args")
  assert args[0] == str(REPO)  # the tasks run in the repository, with its interpreter
  assert args[-4:] == [f"{REPO}/.venv/bin/python", "configs/pair.py:graft",
                       f"node7:{20000 + 4242}", "--config.mesh.data=2"]


def test_sigterm_is_forwarded_without_a_requeue(fake_slurm, tmp_path):
  code, out = _submit(fake_slurm, tmp_path, send=signal.SIGTERM)
  assert code == cli.STOPPED_EXIT, out
  assert _read(fake_slurm, "srun.signals") == ["TERM"]
  assert _read(fake_slurm, "scontrol.log") == []


def test_a_finished_run_exits_with_its_code(fake_slurm, tmp_path):
  fake_slurm.update(FAKE_SRUN_EXIT="0", FAKE_SRUN_TICKS="1")
  code, out = _submit(fake_slurm, tmp_path)
  assert code == 0 and _read(fake_slurm, "scontrol.log") == [], out


def test_a_pair_asks_for_one_node_unless_told_more():
  directives = [line.split()[1] for line in SCRIPT.read_text().splitlines()
                if line.startswith("#SBATCH")]
  assert "--nodes=1" in directives and "--gpus-per-node=4" in directives


def test_the_repository_comes_from_graft_repo_or_one_clear_line(fake_slurm, tmp_path):
  fake_slurm["SLURM_SUBMIT_DIR"] = str(tmp_path)  # submitted from elsewhere
  code, out = _submit(fake_slurm, tmp_path)
  assert (code, out) == (2, f"error: '{tmp_path}' is not the graft_jax repository (no "
                            f"launch/train.py): submit from the repository's root or set "
                            f"GRAFT_REPO=/path/to/graft_jax\n")
  fake_slurm.update(GRAFT_REPO=str(REPO), FAKE_SRUN_TICKS="1")
  code, out = _submit(fake_slurm, tmp_path)
  assert code == 0, out
  assert _read(fake_slurm, "srun.args")[0] == str(REPO)
