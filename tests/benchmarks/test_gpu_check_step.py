"""benchmarks/gpu_check.py --dry --sections=step,sampler_window: the 3-step GRAFT run and
the two-window decode run end to end on the CPU, with tiny models, and report a
measurement and the plan's prediction for every phase the trainer records."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from graft_jax.plan import phases

pytestmark = pytest.mark.slow  # two tiny models' first GRAFT step compiles
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  path = tmp_path_factory.mktemp("gpu_check_step") / "out.json"
  proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry",
                         "--sections=step,sampler_window", f"--json={path}"], cwd=ROOT,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                        text=True, timeout=1500)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return json.loads(path.read_text()), proc.stdout


def test_every_phase_is_measured_and_predicted(report):
  out, stdout = report
  step = out["step"]
  want = set(phases.STEP_PHASES) | {"step"}
  assert set(step["measured"]) == want and want <= set(step["predicted"])
  # The phases are parts of the step the trainer timed, one after another.
  assert sum(step["measured"][p] for p in phases.STEP_PHASES) <= step["measured"]["step"]
  assert step["predicted"]["step"] == pytest.approx(
      sum(step["predicted"][p] for p in phases.STEP_PHASES))
  assert all(step["predicted"][p] > 0 for p in ("sampling", "scoring", "update", "exchange"))
  assert step["compiles_step1"] > 0 and step["compile_s_step1"] > 0
  assert len(step["checkpoint_s"]) == 2 and min(step["checkpoint_s"]) > 0  # saves after 1, 2
  # The hash reward mixes groups, so rows carry a signal and the peers' rows are scored.
  assert 0 < step["predicted"]["signal_fraction"] <= 1
  assert "measured s" in stdout and "plan s" in stdout


def test_two_windows_decode_the_same_rows(report):
  out, _ = report
  small, large = out["sampler_window/64"], out["sampler_window/256"]
  assert (small["rows"], small["live_tokens"]) == (large["rows"], large["live_tokens"]) == (8, 40)
  assert "sampler_window/ratio" in out
