"""Stopping a run on SIGTERM, SIGINT or SIGUSR1 without losing a step: save, then exit.

A scheduler sends SIGTERM at preemption and at the time limit (SLURM's
``--signal`` a chosen signal some minutes before it); dying there would lose
every step since the last periodic checkpoint. Under ``StopSignals`` the first
signal only raises a flag: the trainer finishes the step in flight, saves a
checkpoint of it with its metrics row and peer logs, and raises ``Stopped``.
A step whose update has not yet replaced any parameters is abandoned at once
instead (``abandonable``): redoing it after the restart costs no more than
finishing it now, and the signal's warning time may be shorter than a step.
So is a fresh run's first step at any point on SIGTERM or SIGINT: nothing before
it needs saving, and its compiles can outlast a scheduler's kill grace (the
handler's exception ends an XLA compile in flight). SIGUSR1, the early warning
SLURM sends minutes before a time limit, leaves time to finish it.

One stop is often delivered more than once: ``scancel``, a systemd unit's stop
and a container's stop signal every process, so a process a driver started gets
the signal directly and again when its driver passes it on. Signals within
``DUPLICATE_WINDOW_S`` of the first are that same stop. A deliberate second
signal after the window ends the process at once (exit 128 + the signal's
number), as the default action would: a thread reads Python's signal wakeup
fd, so this works even while the main thread sits in a long XLA call, where
Python-level handlers wait. Orbax commits a checkpoint atomically, so the last
committed one stays usable.

``stopped_since`` tells code off the step's path (a vLLM engine's sampling threads,
its restarts) that the run is stopping, so that nothing is started after the signal,
also after ``Stopped`` was raised, while the run's resources close.

In a multi-process run every process calls ``agreed`` once per step, at the
same point: the processes exchange their flags there, so all stop after the
same step even when only some of them got the signal. No step is abandoned
there, since the processes meet in collectives inside it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time

import numpy as np

from graft_jax import distributed

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
# `#SBATCH --signal` (launch/slurm/train_pair.sbatch): minutes before the time limit.
WARNING_SIGNAL = signal.SIGUSR1
# Copies of one stop arrive together (the direct signal and the driver's, microseconds
# to a driver's poll apart); a person or a scheduler escalating waits longer.
DUPLICATE_WINDOW_S = 2.0
# First stop signals this process got, in all, and when the latest run began.
_stops = {"count": 0, "at_run_start": 0}


def mark() -> int:
  """Now, as a point in this process's stops, for ``stopped_since``."""
  return _stops["count"]


def stopped_since(point: int = 0) -> bool:
  """Whether a stop signal came after ``point`` (a ``mark``) and since the latest run began
  (entered its ``StopSignals``). An engine made after a stopped run, or used again by
  a new run, is not stopping."""
  return _stops["count"] > max(point, _stops["at_run_start"])


class DuplicateWindow:
  """Tells a deliberate second stop signal from a copy of the first (module docstring)."""

  def __init__(self, window_s: float | None = None):
    self.window_s = DUPLICATE_WINDOW_S if window_s is None else window_s
    self.first = None  # time.monotonic() of the first signal

  def repeated(self, now: float | None = None) -> bool:
    """Whether a signal arriving ``now`` is a second stop, not the first or its copy."""
    now = time.monotonic() if now is None else now
    if self.first is None:
      self.first = now
      return False
    return now - self.first > self.window_s


class Stopped(Exception):
  """The run stopped on a signal after saving the checkpoint of its last completed step
  (``step``; None when a fresh run stopped in its first step, with nothing to save)."""

  def __init__(self, signum: int, step: int, saved: bool = True):
    kept = (f"after step {step}; checkpoint {step} saved" if saved else
            f"during step {step + 1}, before any step completed; nothing to save")
    super().__init__(f"stopped by {signal.Signals(signum).name} {kept}; the same command "
                     f"resumes")
    self.signum, self.step = signum, step if saved else None


class StepAbandoned(BaseException):
  """Raised inside a step by the first stop signal while the step may still be undone.

  A ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except Exception``
  in the step swallows it.
  """


class StopSignals:
  """While entered, SIGTERM, SIGINT and SIGUSR1 ask the run to stop; re-entering is a no-op.

  Handlers can only be set from the main thread; entered elsewhere it changes
  nothing and no signal is ever seen.
  """

  def __init__(self, signals=STOP_SIGNALS):
    self.signals = tuple(signals)
    self.signum = 0  # the first stop signal this process got (0: none)
    self.agreed_signum = 0  # the last value of `agreed`
    self._abandon = None  # while a step may be abandoned: () -> whether it still may
    self._depth = 0
    self._previous = {}
    self._pipe = None
    self._old_wakeup_fd = -1
    self._watcher = None

  @property
  def signame(self) -> str:
    return signal.Signals(self.agreed_signum or self.signum).name

  def __enter__(self) -> StopSignals:
    self._depth += 1
    if self._depth > 1 or threading.current_thread() is not threading.main_thread():
      return self
    _stops["at_run_start"] = _stops["count"]
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    self._pipe = (read_fd, write_fd)
    self._previous = {s: signal.getsignal(s) for s in self.signals}
    for s in self.signals:
      signal.signal(s, self._handle)
    self._old_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    self._watcher = threading.Thread(target=self._count, args=(read_fd,), daemon=True,
                                     name="stop-signal-counter")
    self._watcher.start()
    return self

  def __exit__(self, *exc) -> None:
    self._depth -= 1
    if self._depth or self._pipe is None:
      return
    read_fd, write_fd = self._pipe
    signal.set_wakeup_fd(self._old_wakeup_fd)
    for s, handler in self._previous.items():
      signal.signal(s, signal.SIG_DFL if handler is None else handler)
    os.write(write_fd, b"\0")  # ends the counter
    self._watcher.join()
    os.close(read_fd)
    os.close(write_fd)
    self._pipe = None

  def _handle(self, signum, frame) -> None:
    """The first stop signal (in the main thread, between two bytecodes)."""
    del frame
    if self.signum:
      return  # a copy of the first, or a second that the counter thread acts on
    self.signum = signum
    _stops["count"] += 1
    name = signal.Signals(signum).name
    if self._abandon is not None and self._abandon():
      self._abandon = None
      log.warning("%s: abandoning the step in flight (the rerun takes it again) and stopping; "
                  "a second signal more than %g s later ends the run at once",
                  name, DUPLICATE_WINDOW_S)
      raise StepAbandoned()
    log.warning("%s: the run stops after the step in flight and saves it; a second signal "
                "more than %g s later ends the run at once", name, DUPLICATE_WINDOW_S)

  def _count(self, read_fd: int) -> None:
    """Watches stop signals as the OS delivers them; a second stop (``DuplicateWindow``)
    ends the process now."""
    window = DuplicateWindow()
    while True:
      for signum in os.read(read_fd, 64):
        if signum == 0:
          return
        if signum in self.signals:
          if window.repeated():
            os.write(2, f"second {signal.Signals(signum).name}: ending at once; the last "
                        f"committed checkpoint resumes\n".encode())
            os._exit(128 + signum)

  @contextlib.contextmanager
  def abandonable(self, undoable, *, anywhere: bool = False):
    """Within, a first signal raises ``StepAbandoned`` when ``undoable()`` is true then, or
    with ``anywhere`` (a fresh run's first step) when it is not ``WARNING_SIGNAL``
    (single-process runs only)."""
    if self._depth == 0 or distributed.multi_process():
      yield
      return
    self._abandon = (lambda: undoable() or self.signum != WARNING_SIGNAL) if anywhere else undoable
    try:
      yield
    finally:
      self._abandon = None

  def agreed(self) -> int:
    """The signal that asks every process to stop (0: none): the preemption sync point.

    In a multi-process run each process must call it at the same point of
    the same step; the largest signal number any process got wins.
    """
    if distributed.multi_process():
      from jax.experimental import multihost_utils
      got = multihost_utils.process_allgather(np.array([self.signum], np.int32))
      self.agreed_signum = int(np.max(got))
    else:
      self.agreed_signum = self.signum
    return self.agreed_signum
