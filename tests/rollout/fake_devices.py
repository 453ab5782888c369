"""Runs a test script under fake CPU devices: XLA takes the device count at start-up, so
each such script is a fresh interpreter; its last line of output is its JSON report."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_script(module: str, devices: int = 8, timeout: int = 1200) -> dict:
  """``python -m module`` over ``devices`` fake CPU devices; its report."""
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  proc = subprocess.run([sys.executable, "-m", module], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])
