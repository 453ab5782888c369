"""The processes of a job, read from /proc: what a test of a stopped job checks is gone."""

import os
import pathlib
import random
import signal
import subprocess
import time


def _stat(pid: int) -> tuple[str, int, str] | None:
  """(state, parent pid, start time) of ``pid``, None when it is gone."""
  try:
    text = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except OSError:
    return None
  fields = text.rsplit(")", 1)[1].split()
  return fields[0], int(fields[1]), fields[19]


def add_descendants(root: int, seen: dict) -> dict:
  """Adds ``{pid: start time}`` of every process now below ``root`` to ``seen``."""
  parent_of = {}
  for name in os.listdir("/proc"):
    if name.isdigit() and (st := _stat(int(name))) is not None:
      parent_of[int(name)] = st
  tree = {root}
  grew = True
  while grew:
    grew = False
    for pid, (_, ppid, start) in parent_of.items():
      if ppid in tree and pid not in tree:
        tree.add(pid)
        seen.setdefault(pid, start)
        grew = True
  return seen


def running(seen: dict) -> list[int]:
  """The pids of ``seen`` still running (the same process: same start time, not a zombie)."""
  return [pid for pid, start in seen.items()
          if (st := _stat(pid)) is not None and st[2] == start and st[0] not in "ZX"]


def wait_for(predicate, what: str, proc=None, timeout_s: float = 1200.0, seen=None,
             root: int | None = None) -> None:
  """Polls ``predicate()`` until true; fails after ``timeout_s`` or when ``proc`` ends first.
  Meanwhile records the processes below ``root`` into ``seen``."""
  deadline = time.monotonic() + timeout_s
  while not predicate():
    assert proc is None or proc.poll() is None, (
        f"the job ended (exit {proc.returncode}) before {what}")
    assert time.monotonic() < deadline, f"timed out waiting for {what}"
    if seen is not None:
      add_descendants(root, seen)
    time.sleep(0.05)
  if seen is not None:
    add_descendants(root, seen)


def draw(points):
  """One of ``points``: drawn afresh locally, the same on CI (`CI` set, as tests/conftest.py
  reads it)."""
  on_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
  return random.Random(0 if on_ci else None).choice(points)


def signal_every_process(root: int, seen: dict, signum=signal.SIGTERM) -> list[int]:
  """``signum`` to ``root`` and every process below it, as ``scancel``, a systemd unit's stop
  or a container's stop sends it (each then also gets it from its driver); returns them."""
  add_descendants(root, seen)
  pids = [root] + running(seen)
  for pid in pids:
    try:
      os.kill(pid, signum)
    except ProcessLookupError:
      pass
  return pids


def stopped_at(argv, cwd, reached, err_path, *, everyone: bool = False,
               timing: dict | None = None) -> tuple[int, str, dict]:
  """Runs ``argv`` and sends it SIGTERM once ``reached(seen)`` holds, ``seen`` being
  ``{pid: start time}`` of the job's processes so far; returns (exit code, stderr, seen).
  ``everyone``: to every process of the job at once (``signal_every_process``).
  ``timing`` gets ``"stop_s"``: the seconds from the signal to the exit."""
  with open(err_path, "w") as err:
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
  seen: dict = {}
  try:
    wait_for(lambda: reached(seen), "the stop point", proc, seen=seen, root=proc.pid)
    t0 = time.monotonic()
    if everyone:
      signal_every_process(proc.pid, seen)
    else:
      os.kill(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=900)
    stop_s = time.monotonic() - t0
  finally:
    if proc.poll() is None:
      proc.kill()
  if timing is not None:
    timing["stop_s"] = stop_s
  return code, pathlib.Path(err_path).read_text(), seen
