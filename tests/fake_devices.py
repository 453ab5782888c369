"""Fresh interpreters over fake CPU devices: XLA takes the device count at start-up, so
a test of a mesh runs its program in a subprocess with this environment.

Under a loaded CI machine one fake device's thread can reach a collective long after
the others; XLA's CPU runtime aborts the process when a rendezvous waits 40 s, so the
environment raises that limit (a hang still ends at the test's own timeout)."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLLECTIVE_TIMEOUT_S = 600


def env(devices: int, **extra: str) -> dict:
  """``os.environ`` for a JAX process over ``devices`` fake CPU devices."""
  flags = (f"--xla_force_host_platform_device_count={devices} "
           f"--xla_cpu_collective_call_terminate_timeout_seconds={COLLECTIVE_TIMEOUT_S} "
           f"--xla_cpu_collective_timeout_seconds={COLLECTIVE_TIMEOUT_S}")
  return dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", **extra)


def run_script(module: str, devices: int = 8, timeout: int = 1200) -> dict:
  """``python -m module`` over ``devices`` fake CPU devices; its report (the last line
  of its output, JSON)."""
  proc = subprocess.run([sys.executable, "-m", module], cwd=ROOT,
                        env=env(devices, PYTHONPATH=str(ROOT)), capture_output=True,
                        text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])
