"""Process-group guard for a vLLM server; run as a script by the vLLM venv's Python.

Standard library only: the vLLM venv does not have graft_jax installed.
Usage: ``python -I vllm_watchdog.py [--remove-when-orphaned DIR]... PYTHON -m MODULE ARGS...``.

When the trainer dies without stopping the server (SIGKILL), the watchdog stops it
and removes each ``DIR`` (the staged weights, the server's socket folder), which
would otherwise hold a copy of the weights in memory until the node reboots. The
watchdog ends with its server (the trainer sees the server gone by it); a reaper
it leaves, in a session of its own, removes the folders if the trainer dies later.

A server still running ``STOP_KILL_S`` after a SIGTERM (the trainer's stop, or a
scheduler's stop of every process) is killed: vLLM's HTTP server then waits for
open connections to close, and a request its stopped engine will never answer
holds one, so it would outlast the stop's grace.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

POLL_S = 0.5
GRACE_S = 10.0
STOP_KILL_S = 3.0


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


def _cleanup_args(argv):
  """(folders to remove when orphaned, the server's command) of our ``argv``."""
  remove = []
  while argv[:1] == ["--remove-when-orphaned"]:
    remove.append(argv[1])
    argv = argv[2:]
  return remove, argv


def _leave_reaper(remove, launcher: int) -> None:
  """A process that removes ``remove`` once ``launcher`` is gone, and ends as soon as
  the folders are (the trainer removed them, or a restart's watchdog took over)."""
  if remove:
    subprocess.Popen([sys.executable, "-I", __file__, "--reap", str(launcher), *remove],
                     start_new_session=True, stdin=subprocess.DEVNULL)


def _reap(launcher: int, remove) -> None:
  while any(os.path.exists(f) for f in remove):
    try:
      os.kill(launcher, 0)
    except ProcessLookupError:
      for folder in remove:
        shutil.rmtree(folder, ignore_errors=True)
      return
    time.sleep(POLL_S)


def main(argv):
  if argv[:1] == ["--reap"]:
    _reap(int(argv[1]), argv[2:])
    return
  remove, argv = _cleanup_args(argv)
  parent = os.getppid()
  # SIGUSR1 is the trainer's "save and stop" warning (SLURM's --signal reaches every
  # process of the job step): the server ignores it (the disposition survives exec,
  # and vLLM sets no handler of its own) and keeps serving until the trainer, done
  # with its step, stops it.
  signal.signal(signal.SIGUSR1, signal.SIG_IGN)
  server = subprocess.Popen(argv)
  # A SIGTERM to the group reaches the server too; we only need to outlive it
  # long enough to clean up whatever it leaves behind.
  stopped = []
  for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, lambda *_: stopped.append(time.monotonic()))
  while True:
    code = server.poll()
    if code is not None:
      print(f"[watchdog] server exited with {code}; clearing its process group", flush=True)
      _leave_reaper(remove, parent)
      _clear_group(server)
    if stopped and time.monotonic() > stopped[0] + STOP_KILL_S:
      print(f"[watchdog] server still running {STOP_KILL_S:g} s after SIGTERM; killing it",
            flush=True)
      _leave_reaper(remove, parent)
      os.killpg(os.getpgid(0), signal.SIGKILL)
    if os.getppid() != parent:
      # The trainer died without stopping us (SIGKILL, SIGTERM without atexit).
      print("[watchdog] launcher is gone; stopping the server", flush=True)
      for folder in remove:
        shutil.rmtree(folder, ignore_errors=True)
      _clear_group(server)
    time.sleep(POLL_S)


if __name__ == "__main__":
  main(sys.argv[1:])
