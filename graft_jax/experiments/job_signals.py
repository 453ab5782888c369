"""Stop signals in a job of several processes: passed on, saved, one line, exit 75, no orphans.

The trainer stops cleanly on SIGTERM, SIGINT or SIGUSR1 (``graft_jax.preemption``).
A job that runs trainers in processes of its own (the toy job's spawned workers, the
benchmark's cell subprocesses) needs the same from its driver, or a scheduler's
signal kills the driver alone and leaves its workers training with no one to
report to. Under ``Driver`` the first stop signal is passed on to every process
of the job; each saves the step in flight and stops; the driver waits for them
(at most ``SAVE_GRACE_S``) and raises ``JobStopped``, which the launchers'
console (``graft_jax.cli.guard``) prints as one line with exit code 75. A second
signal ends every process at once, as it ends a lone trainer.

A scheduler's stop (``scancel``, a systemd or container stop) signals every
process, so each worker gets it directly and again from its driver: within
``preemption.DUPLICATE_WINDOW_S`` of the first, a signal is that same stop, in
the driver and in the workers; only a later one is a second signal.

A worker stops with its driver: Linux sends it a signal when the driver dies
(``prctl(PR_SET_PDEATHSIG)``), which it turns into one SIGTERM, and a watchdog
thread ends it once it is idle with no parent left (elsewhere it also sends
that SIGTERM). The parent-death signal is ``PARENT_DEATH_SIGNAL``, not SIGTERM
itself: Linux sends it each time the worker is handed to another thread of the
dying driver, so a driver killed outright can send it several times, and a
second SIGTERM would end the worker before it saves. Workers run in a
process group of their own, so a terminal's Ctrl-C reaches the driver alone and
each worker sees one signal, passed on once.

Pool workers get the signal through a shared event that their watchdog turns
into the same signal sent to themselves: a worker still starting (no handler
yet) would otherwise die of it, and a broken pool terminates every worker,
saves in flight included.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time

from graft_jax import cli
from graft_jax import preemption

log = logging.getLogger(__name__)

# How long a driver waits, after passing a stop signal on, for its processes to finish
# their step and save it; the ones left are then killed (their last committed
# checkpoint resumes). A toy step and its checkpoint take far less.
SAVE_GRACE_S = 300.0
POLL_S = 0.2
PARENT_ENV = "GRAFT_JOB_PARENT"  # a subprocess's driver pid: it stops when that one ends
_PR_SET_PDEATHSIG = 1
PARENT_DEATH_SIGNAL = signal.SIGUSR2  # sent once per exiting thread of the parent
_worker = {"busy": False, "parent": None}
_stop_sent = threading.Lock()  # taken, never given back, by the one stop a worker sends itself
_active: list[preemption.StopSignals] = []


@dataclasses.dataclass(frozen=True)
class Halted:
  """A task a stop signal ended after saving (``started``; ``step``: its saved step when
  known) or kept from starting."""

  signum: int
  started: bool = False
  step: int | None = None

  def describe(self, label: str) -> str:
    if not self.started:
      return f"{label} not started"
    return f"{label} stopped" if self.step is None else f"{label} saved after step {self.step}"


class JobStopped(preemption.Stopped):
  """A job stopped by a signal: its runs saved where they stopped, the finished ones kept."""

  def __init__(self, signum: int, halted: dict[str, Halted], finished: int):
    text = (f"stopped by {signal.Signals(signum).name}: "
            + ", ".join(h.describe(label) for label, h in halted.items())
            + f"{'; ' if halted else ''}{finished} finished; the same command resumes "
            "and reuses the finished ones")
    Exception.__init__(self, text)  # pylint: disable=non-parent-init-called
    self.signum, self.step, self.halted = signum, None, halted


@contextlib.contextmanager
def job_stop():
  """A ``StopSignals`` shared by every run this process trains (``active``): a signal that
  comes between runs, or during an evaluation, stops the next run before its first step."""
  with preemption.StopSignals() as stop:
    _active.append(stop)
    try:
      yield stop
    finally:
      _active.remove(stop)


def active() -> preemption.StopSignals | None:
  """The ``job_stop`` this process is under (the trainer enters it), None outside one."""
  return _active[-1] if _active else None


def run_task(fn, *args, **kwargs):
  """``fn(*args, **kwargs)``, or ``Halted`` when a stop signal ended it (``preemption.Stopped``)
  or came before it started."""
  stop = active()
  if stop is not None and stop.signum:
    return Halted(stop.signum)
  _worker["busy"] = True
  try:
    return fn(*args, **kwargs)
  except preemption.Stopped as e:
    return Halted(e.signum, started=True, step=e.step)
  finally:
    _worker["busy"] = False
    if _worker["parent"] is not None and os.getppid() != _worker["parent"]:
      os._exit(cli.STOPPED_EXIT)  # saved; nobody is left to take the result


def _stop_once(signum: int) -> None:
  """``signum`` to this process, unless a stop was already sent here by the driver's event
  or its death: each way the driver can stop a worker counts once."""
  if _stop_sent.acquire(blocking=False):
    os.kill(os.getpid(), signum)


def _parent_gone(signum=None, frame=None) -> None:
  """The driver is gone: a SIGTERM to this process, however often this is called."""
  del signum, frame
  _stop_once(signal.SIGTERM)


def die_with_parent(parent: int) -> bool:
  """Asks Linux for ``PARENT_DEATH_SIGNAL`` when ``parent`` ends, turned into one SIGTERM;
  False when that is left to a watchdog (elsewhere than Linux, or off the main thread)."""
  armed = False
  if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread():
    signal.signal(PARENT_DEATH_SIGNAL, _parent_gone)
    libc = ctypes.CDLL(None, use_errno=True)
    armed = libc.prctl(_PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL), 0, 0, 0) == 0
  if os.getppid() != parent:  # it ended before the request: no signal will come
    _parent_gone()
    return True
  return armed


def follow(parent: int, event=None, signum=None) -> None:
  """In a process a driver started (after ``job_stop``): stop with ``parent``, and on
  ``event`` (a multiprocessing Event; ``signum``: a shared int) send ``signum`` to itself."""
  _worker["parent"] = parent
  armed = die_with_parent(parent)

  def watch():
    passed = False
    while True:
      if event is not None and not passed and event.wait(POLL_S):
        passed = True
        _stop_once(signum.value)
      elif event is None or passed:
        time.sleep(POLL_S)
      if os.getppid() != parent:
        if event is not None and not _worker["busy"]:  # a pool worker between tasks
          os._exit(cli.STOPPED_EXIT)
        if not armed:
          _parent_gone()

  threading.Thread(target=watch, daemon=True, name="job-parent-watch").start()


def follow_driver_env() -> None:
  """``follow`` the driver named by ``PARENT_ENV``, when a driver started this process."""
  if os.environ.get(PARENT_ENV):
    follow(int(os.environ[PARENT_ENV]))


def _start_pool_worker(event, signum, initializer, initargs) -> None:
  """A pool worker's set-up: its own process group, a ``job_stop`` for its life, ``follow``
  of the driver, then the caller's ``initializer(*initargs)``."""
  os.setpgid(0, 0)
  # Entered for the worker's life: its handlers stay until the process ends.
  _active.append(preemption.StopSignals().__enter__())  # pylint: disable=unnecessary-dunder-call
  follow(multiprocessing.parent_process().pid, event, signum)
  if initializer is not None:
    initializer(*initargs)


def run_tasks(tasks: dict, jobs: int, initializer=None, initargs=()) -> dict:
  """``{label: fn(*args, **kwargs)}`` of ``tasks`` (``{label: (fn, args, kwargs)}``), ``jobs``
  at a time: in this process, or above 1 in spawned processes (``initializer(*initargs)``
  sets each up). A stop signal stops every task at its next step, each saving it, and
  raises ``JobStopped``."""
  if jobs == 1:
    with job_stop() as stop:
      done = {k: run_task(fn, *args, **kwargs) for k, (fn, args, kwargs) in tasks.items()}
    stop_if_halted(stop.signum, done)
    return done
  ctx = multiprocessing.get_context("spawn")  # JAX must not be forked
  event, signum = ctx.Event(), ctx.Value("i", 0)
  with pool_driver(event, signum) as driver, concurrent.futures.ProcessPoolExecutor(
      jobs, mp_context=ctx, initializer=_start_pool_worker,
      initargs=(event, signum, initializer, initargs)) as pool:
    futures = {k: pool.submit(run_task, fn, *args, **kwargs)
               for k, (fn, args, kwargs) in tasks.items()}
    done = gather(futures, driver)
  stop_if_halted(driver.signum, done)
  return done


class Driver:
  """While entered (a driver's main thread), the first stop signal is remembered and handed
  to ``pass_on(signum)``; a second (a copy of the first within the duplicate window does
  not count) is handed on and ends the driver at once (128 + its number)."""

  def __init__(self, pass_on):
    self.pass_on = pass_on
    self.signum = 0
    self.stopped_at = None  # time.monotonic() at the first signal
    self._previous = {}
    self._window = preemption.DuplicateWindow()

  def __enter__(self) -> Driver:
    if threading.current_thread() is threading.main_thread():
      self._previous = {s: signal.getsignal(s) for s in preemption.STOP_SIGNALS}
      for s in preemption.STOP_SIGNALS:
        signal.signal(s, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for s, handler in self._previous.items():
      signal.signal(s, signal.SIG_DFL if handler is None else handler)

  def _handle(self, signum, frame) -> None:
    del frame
    name = signal.Signals(signum).name
    second = self._window.repeated()
    if self.signum and not second:
      return  # the first stop again, as a scheduler's stop of every process delivers it
    self.pass_on(signum)
    if second:
      os.write(2, f"second {name}: ending the job at once; the last committed checkpoints "
                  f"resume\n".encode())
      os._exit(128 + signum)
    self.signum, self.stopped_at = signum, time.monotonic()
    log.warning("%s: passed on to the job's processes, which save and stop; a second "
                "signal ends the job at once", name)

  def overdue(self, grace_s: float = SAVE_GRACE_S) -> bool:
    """Whether the job's processes have had ``grace_s`` to save since the first signal;
    then ``kill`` ends the ones left."""
    return self.stopped_at is not None and time.monotonic() > self.stopped_at + grace_s


def kill(pids) -> None:
  """SIGKILL to each of ``pids`` still running: they had their time to save."""
  log.warning("the job's processes did not save in time: ending them (their last committed "
              "checkpoint resumes)")
  for pid in pids:
    _signal(pid, signal.SIGKILL)


def pool_driver(event, signum) -> Driver:
  """The ``Driver`` of a pool whose workers watch ``event`` (``follow``): the first
  signal sets the event, a second goes to every worker directly."""
  def pass_on(s):
    if event.is_set():
      for p in multiprocessing.active_children():
        _signal(p.pid, s)
    else:
      signum.value = s
      event.set()
  return Driver(pass_on)


def _signal(pid: int, signum: int) -> None:
  with contextlib.suppress(ProcessLookupError):
    os.kill(pid, signum)


def signal_all(procs, signum: int) -> None:
  """``signum`` to each running ``subprocess.Popen`` of ``procs``."""
  for proc in procs:
    if proc.poll() is None:
      _signal(proc.pid, signum)


def subprocess_options() -> dict:
  """``subprocess.Popen`` keywords for a process of the job: a process group of its own,
  and this driver's pid for ``follow_driver_env``."""
  return dict(process_group=0, env=dict(os.environ, **{PARENT_ENV: str(os.getpid())}))


def gather(futures: dict, driver: Driver) -> dict:
  """``{label: result}`` of a pool's ``futures``; after a stop signal, ``Halted`` for those
  it ended or kept from starting. Workers still busy when the driver is ``overdue`` are
  killed."""
  while pending := [f for f in futures.values() if not f.done()]:
    if driver.signum:
      for f in pending:
        f.cancel()  # the ones not yet handed to a worker
    if driver.overdue():
      kill([p.pid for p in multiprocessing.active_children()])
      concurrent.futures.wait(pending)
      break
    concurrent.futures.wait(pending, timeout=POLL_S,
                            return_when=concurrent.futures.FIRST_COMPLETED)
  out = {}
  for label, f in futures.items():
    if f.cancelled():
      out[label] = Halted(driver.signum)
    elif f.exception() is not None and driver.signum:
      out[label] = Halted(driver.signum, started=True)  # its worker ended without a result
    else:
      out[label] = f.result()
  return out


def stop_if_halted(signum: int, results: dict) -> None:
  """Raises ``JobStopped`` when a stop signal came (``signum``) or a result is ``Halted``."""
  halted = {k: r for k, r in results.items() if isinstance(r, Halted)}
  if signum or halted:
    raise JobStopped(signum or next(iter(halted.values())).signum, halted,
                     finished=len(results) - len(halted))
