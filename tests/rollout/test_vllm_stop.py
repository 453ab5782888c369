"""A scheduler's stop of every process of a run with vLLM sidecars: saved, in seconds, nothing
left, and the rerun resumes exactly.

``scancel``, a systemd unit's stop and a container's stop send SIGTERM to every process at
once: the trainer, each server's watchdog, the servers and their engine processes. Sent
while the first model samples, while its new weights go to its server after the update,
or while orbax writes a checkpoint (drawn, as ``tests/experiments/job_processes.draw``
draws), the run must save its last completed step, exit 75 within 10 s of the signal
(SLURM's and Kubernetes' default kill grace is 30 s, Docker's 10 s), leave no process,
staged-weights folder or socket folder behind, and, run again, end with the parameters
of an uninterrupted run.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from graft_jax import cli
from graft_jax.outputs import checkpoint, checkpoint_manifest
from graft_jax.outputs.metrics_writer import read_jsonl
from tests.experiments import job_processes
from tests.rollout import vllm_fixtures

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]
# (where the signal comes, the last completed step then: the checkpoint kept). At update@0
# the fresh run's first step has changed the first model and still compiles the second's
# update: it stops at once, with nothing to save. Past it, a step whose update has begun is
# finished.
POINTS = {"update@0": None, "sampling@2": 2, "update@1": 2, "save@2": 2}
STOP_S = 10.0


def _argv(workdir, *point):
  return [sys.executable, "-m", "tests.rollout.vllm_stop_child", str(workdir), *point]


def _params(workdir):
  with np.load(workdir / "final_params.npz") as f:
    return {k: f[k] for k in f.files}


def test_a_stop_of_every_process_saves_in_seconds_and_the_rerun_resumes(tmp_path):
  vllm_fixtures.require_vllm_python()
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  ref = subprocess.run(_argv(tmp_path / "ref"), cwd=ROOT, capture_output=True, text=True,
                       timeout=1200, env=env)
  assert ref.returncode == 0, ref.stderr[-4000:]

  point = job_processes.draw(sorted(POINTS))
  cut, timing = tmp_path / "cut", {}
  reached = cut / "reached"
  code, err, seen = job_processes.stopped_at(
      _argv(cut, point), ROOT, lambda _: reached.exists(), tmp_path / "err.log",
      everyone=True, timing=timing)
  assert code == cli.STOPPED_EXIT, (point, err[-4000:])
  print(f"{point}: exit {code} {timing['stop_s']:.2f} s after SIGTERM to every process")
  assert timing["stop_s"] < STOP_S, (point, timing, err)
  saved = POINTS[point]
  kept = (f"after step {saved}; checkpoint {saved} saved" if saved is not None else
          "during step 1, before any step completed; nothing to save")
  assert err.splitlines()[-1] == f"stopped by SIGTERM {kept}; the same command resumes", (
      point, err[-4000:])
  assert "Traceback" not in err and "restarting vLLM" not in err, (point, err[-4000:])
  committed = sorted(int(p.parent.name)
                     for p in cut.glob(f"checkpoints/*/{checkpoint.COMMIT_MARKER}"))
  assert committed[-1:] == ([] if saved is None else [saved]), (point, committed)
  if saved is not None:
    assert checkpoint_manifest.verify(cut / "checkpoints" / str(saved)) is None
  rows = read_jsonl(cut / "metrics.jsonl") if (cut / "metrics.jsonl").exists() else []
  assert [r["step"] for r in rows] == list(range(saved or 0))
  job_processes.wait_for(lambda: not job_processes.running(seen), "no process of the run left",
                         timeout_s=5)
  folders = [pathlib.Path(p) for p in reached.read_text().split()]
  assert len(folders) == 4 and not [f for f in folders if f.exists()], folders

  again = subprocess.run(_argv(cut), cwd=ROOT, capture_output=True, text=True, timeout=1200,
                         env=env)
  assert again.returncode == 0, again.stderr[-4000:]
  want, got = _params(tmp_path / "ref"), _params(cut)
  assert want.keys() == got.keys()
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)
