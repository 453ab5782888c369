"""Process-group guard for a vLLM server; run as a script by the vLLM venv's Python.

Standard library only: the vLLM venv does not have graft_jax installed.
Usage: ``python -I vllm_watchdog.py PYTHON -m MODULE ARGS...``.
"""

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5
GRACE_S = 10.0


def _others_alive() -> bool:
  """Whether a process of our group other than us is still running (Linux /proc)."""
  me, group = os.getpid(), os.getpgid(0)
  for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
    if not name.isdigit() or int(name) == me:
      continue
    try:
      with open(f"/proc/{name}/stat") as f:
        state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
    except (OSError, ValueError):
      continue
    if int(pgrp) == group and state not in "ZX":
      return True
  return False


def _clear_group(server) -> None:
  """SIGTERM the group, wait for it (vLLM's resource tracker then unlinks its
  shared memory and semaphores), SIGKILL whatever is left, ourselves last."""
  os.killpg(os.getpgid(0), signal.SIGTERM)  # we ignore it
  deadline = time.monotonic() + GRACE_S
  while time.monotonic() < deadline:
    server.poll()
    if not _others_alive():
      break
    time.sleep(POLL_S)
  os.killpg(os.getpgid(0), signal.SIGKILL)


def main(argv):
  parent = os.getppid()
  # SIGUSR1 is the trainer's "save and stop" warning (SLURM's --signal reaches every
  # process of the job step): the server ignores it (the disposition survives exec,
  # and vLLM sets no handler of its own) and keeps serving until the trainer, done
  # with its step, stops it.
  signal.signal(signal.SIGUSR1, signal.SIG_IGN)
  server = subprocess.Popen(argv)
  # A SIGTERM to the group reaches the server too; we only need to outlive it
  # long enough to clean up whatever it leaves behind.
  signal.signal(signal.SIGTERM, lambda *_: None)
  signal.signal(signal.SIGINT, lambda *_: None)
  while True:
    code = server.poll()
    if code is not None:
      print(f"[watchdog] server exited with {code}; clearing its process group", flush=True)
      _clear_group(server)
    if os.getppid() != parent:
      # The trainer died without stopping us (SIGKILL, SIGTERM without atexit).
      print("[watchdog] launcher is gone; stopping the server", flush=True)
      _clear_group(server)
    time.sleep(POLL_S)


if __name__ == "__main__":
  main(sys.argv[1:])
