"""Starting a test's own CPU processes of one distributed run, and stopping them by pid."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import socket
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def env(**extra) -> dict:
  out = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  out.pop("XLA_FLAGS", None)  # device counts come from jax_num_cpu_devices in the child
  out.update(extra)
  return out


def spawn(module: str, args, log_path, **extra_env) -> subprocess.Popen:
  """``python -m module args...`` from the repository root, output to ``log_path``."""
  with open(log_path, "wb") as log:
    return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                            env=env(**extra_env), stdout=log, stderr=subprocess.STDOUT)


def finish(procs, timeout: float) -> list[int]:
  """Return codes; on a timeout every process still running is killed (by its pid)."""
  codes = []
  try:
    for p in procs:
      codes.append(p.wait(timeout=timeout))
  finally:
    for p in procs:
      if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
  return codes


# A vLLM server's own lines (its log tail, quoted in a sidecar error) would push the
# trainer's error out of a short tail.
_NOISE = re.compile(r"spmd_partitioner|^\s*\((APIServer|EngineCore)[^)]*\)|^\s*INFO:\s")


def tail(path, chars: int = 3000) -> str:
  """The last ``chars`` of a process's log, less the partitioner's and vLLM's lines."""
  text = pathlib.Path(path).read_text(errors="replace")
  return "\n".join(l for l in text.splitlines() if not _NOISE.search(l))[-chars:]
