"""A reusable pool of verifier processes with a hard per-item timeout.

The parent watches every in-flight item. A worker that has not reported an
item within ``timeout_s + hard_grace_s`` is killed (SIGKILL, which works even
inside a C-level sympy loop) and replaced; its item scores TIMEOUT and the
items queued behind it are re-sent, so nothing else in the batch is lost.

Workers are started with the 'forkserver' context (the parent may run JAX,
whose threads make fork unsafe). As with any spawn/forkserver pool, a script
that creates the pool must guard its entry point with
``if __name__ == "__main__":``.
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing as mp
from multiprocessing import connection, forkserver
from multiprocessing import util as mp_util
import os
import signal
import threading
import time
import weakref

from graft_jax.rewards import worker as worker_lib

# Keep unread bytes per worker below the OS pipe buffer (64 KiB on Linux):
# a parent blocked in send() to a hung worker could never enforce timeouts.
_MAX_PIPELINED_CHARS = 16_000
_START_TIMEOUT_S = 300.0
_MAX_START_FAILURES = 4
_live_pools: "weakref.WeakSet[VerifierPool]" = weakref.WeakSet()


@dataclasses.dataclass
class PoolCounts:
  """What the pool had to do during one `run` call."""
  hard_timeouts: int = 0   # items whose worker had to be killed
  crashes: int = 0         # items whose worker died on its own
  restarts: int = 0        # workers re-spawned


class _Worker:
  """One child process, its pipe, and the items sent to it in order."""

  def __init__(self, ctx):
    self.conn, child_conn = ctx.Pipe(duplex=True)
    self.proc = ctx.Process(target=worker_lib.worker_main, args=(child_conn,),
                            daemon=True, name="graft-verifier")
    self.proc.start()
    child_conn.close()
    self.ready = False
    self.started_at = time.monotonic()
    self.inflight = collections.deque()  # item ids, in processing order
    self.inflight_chars = 0
    self.deadline = None

  def stop(self, kill: bool) -> None:
    if kill:
      self.proc.kill()
    else:
      try:
        self.conn.send(None)
      except OSError:
        self.proc.kill()
    self.proc.join(timeout=2.0)
    if self.proc.is_alive():
      self.proc.kill()
      self.proc.join(timeout=2.0)
    self.conn.close()


def _start_forkserver_deaf() -> None:
  """Starts multiprocessing's fork server, if it is not running, with the run's stop
  signals ignored (``worker.IGNORED_SIGNALS``; an ignored signal stays ignored across
  exec). A scheduler signals every process of a job step: without this, its warning
  signal would end the fork server, and no worker could be replaced afterwards.
  Signal dispositions can only be changed from the main thread; elsewhere the
  server starts as it would (on the first worker)."""
  if threading.current_thread() is not threading.main_thread():
    return
  before = {s: signal.signal(s, signal.SIG_IGN) for s in worker_lib.IGNORED_SIGNALS}
  try:
    forkserver.ensure_running()
  finally:
    for s, handler in before.items():
      signal.signal(s, handler)


class VerifierPool:
  """Worker processes running math-verify; create once, reuse, then close.

  Usable as a context manager; any pool still open is closed at interpreter
  exit.
  """

  def __init__(self, num_workers: int | None = None, *,
               chunk_size: int = 8, hard_grace_s: float = 1.0,
               soft_timeout: bool = True):
    """Starts the workers (they import sympy in the background).

    Args:
      num_workers: processes; defaults to the number of CPUs.
      chunk_size: items per message to a worker (cuts IPC overhead).
      hard_grace_s: extra time past ``timeout_s`` before a worker is killed.
      soft_timeout: also arm an in-worker interval timer at ``timeout_s``,
        which usually stops a slow sympy call without a re-spawn. Tests turn
        it off to exercise the hard kill.
    """
    self.num_workers = num_workers or os.cpu_count() or 1
    if self.num_workers < 1 or chunk_size < 1 or hard_grace_s < 0:
      raise ValueError(
          f"VerifierPool: need num_workers >= 1, chunk_size >= 1, "
          f"hard_grace_s >= 0; got {num_workers}, {chunk_size}, {hard_grace_s}")
    self.chunk_size = chunk_size
    self.hard_grace_s = hard_grace_s
    self.soft_timeout = soft_timeout
    self._ctx = mp.get_context("forkserver")
    # Only takes effect if the forkserver is not running yet; then each
    # re-spawned worker forks with math-verify already imported.
    self._ctx.set_forkserver_preload(["graft_jax.rewards.worker", "math_verify"])
    _start_forkserver_deaf()
    self._lock = threading.Lock()
    self._workers = [_Worker(self._ctx) for _ in range(self.num_workers)]
    self._closed = False
    _live_pools.add(self)

  def __enter__(self) -> "VerifierPool":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def close(self) -> None:
    """Stops every worker; the pool cannot be used afterwards."""
    if self._closed:
      return
    self._closed = True
    for w in self._workers:
      w.stop(kill=bool(w.inflight))
    self._workers = []

  @property
  def worker_pids(self) -> list[int]:
    return [w.proc.pid for w in self._workers]

  def run(self, items, *, timeout_s: float) -> tuple[list[int], PoolCounts]:
    """Checks ``items`` = [(gold_content, text, is_boxed), ...].

    Returns one outcome code per item (see `worker.py`) and the pool counts.
    """
    if self._closed:
      raise RuntimeError("VerifierPool.run called after close()")
    if timeout_s <= 0:
      raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    with self._lock:
      try:
        return _Run(self, items, timeout_s).loop()
      except BaseException:
        # Interrupted (e.g. Ctrl-C): busy workers would later answer for items
        # of this abandoned batch, so they are replaced.
        for i, w in enumerate(self._workers):
          if w.inflight:
            self._replace(i, kill=True)
        raise

  def _replace(self, i: int, kill: bool) -> None:
    self._workers[i].stop(kill=kill)
    self._workers[i] = _Worker(self._ctx)


class _Run:
  """The state of one `VerifierPool.run` call."""

  def __init__(self, pool: VerifierPool, items, timeout_s: float):
    self.pool = pool
    self.items = items
    self.timeout_s = timeout_s
    self.soft_s = timeout_s if pool.soft_timeout else 0.0
    self.pending = collections.deque(range(len(items)))
    self.outcomes = [None] * len(items)
    self.remaining = len(items)
    self.counts = PoolCounts()
    self.start_failures = 0
    self.crashed_once = set()

  def loop(self) -> tuple[list[int], PoolCounts]:
    while self.remaining:
      for i in range(len(self.pool._workers)):  # pylint: disable=protected-access
        self._dispatch(i)
      self._wait_and_collect()
      self._enforce_deadlines()
    return self.outcomes, self.counts

  def _chunk_size(self) -> int:
    # Guided self-scheduling: chunks shrink as the queue drains, so no worker
    # sits idle behind a slow chunk at the end of the batch.
    share = -(-len(self.pending) // (2 * self.pool.num_workers))
    return max(1, min(self.pool.chunk_size, share))

  def _dispatch(self, i: int) -> None:
    w = self.pool._workers[i]  # pylint: disable=protected-access
    # Up to two chunks in flight: the worker starts the next one at once.
    if not w.ready or not self.pending or len(w.inflight) >= 2 * self.pool.chunk_size:
      return
    if not w.inflight and not w.proc.is_alive():
      self._on_death(i)  # died while idle: nothing of this batch is lost
      return
    size, chunk, chars = self._chunk_size(), [], 0
    while self.pending and len(chunk) < 2 * self.pool.chunk_size:
      j = self.pending[0]
      gold, text, is_boxed = self.items[j]
      # Past the target size, only finish the current gold's items: a gold
      # parsed once per worker is cached there (and parsing one is slow).
      if len(chunk) >= size and gold != chunk[-1][1]:
        break
      n = len(gold) + len(text)
      if chunk and chars + n > _MAX_PIPELINED_CHARS:
        break
      if w.inflight and w.inflight_chars + chars + n > _MAX_PIPELINED_CHARS:
        break  # only an idle (reading) worker gets a large message
      self.pending.popleft()
      chunk.append((j, gold, text, is_boxed))
      chars += n
    if not chunk:
      return
    try:
      w.conn.send((self.soft_s, chunk))
    except OSError:  # died since the check above; the chunk never arrived
      self.pending.extendleft(reversed([c[0] for c in chunk]))
      self._on_death(i)
      return
    if not w.inflight:
      w.deadline = time.monotonic() + self.timeout_s + self.pool.hard_grace_s
    w.inflight.extend(j for j, *_ in chunk)
    w.inflight_chars += chars

  def _wait_and_collect(self) -> None:
    workers = self.pool._workers  # pylint: disable=protected-access
    now = time.monotonic()
    deadlines = [w.deadline for w in workers if w.deadline is not None]
    wait_s = max(0.0, min(deadlines) - now) if deadlines else 1.0
    by_obj = {}
    for i, w in enumerate(workers):
      by_obj[w.conn] = (i, w)
      by_obj[w.proc.sentinel] = (i, w)
    for obj in connection.wait(list(by_obj), timeout=wait_s):
      i, w = by_obj[obj]
      if workers[i] is not w:
        continue  # already replaced while handling an earlier event
      if obj is w.conn:
        self._drain(i)
      elif not w.conn.poll():  # exited, nothing left to read
        self._on_death(i)

  def _drain(self, i: int) -> None:
    w = self.pool._workers[i]  # pylint: disable=protected-access
    try:
      while w.conn.poll():
        msg = w.conn.recv()
        if isinstance(msg, tuple):  # ("ready", None)
          w.ready = True
          continue
        for item_id, outcome in msg:
          self._finish(w, item_id, outcome)
    except (EOFError, OSError):
      self._on_death(i)
      return
    if w.inflight:
      w.deadline = time.monotonic() + self.timeout_s + self.pool.hard_grace_s
    else:
      w.deadline = None

  def _finish(self, w: _Worker, item_id: int, outcome: int) -> None:
    assert w.inflight and w.inflight[0] == item_id, "worker reordered items"
    w.inflight.popleft()
    gold, text, _ = self.items[item_id]
    w.inflight_chars -= len(gold) + len(text)
    self.outcomes[item_id] = outcome
    self.remaining -= 1

  def _fail_head_and_requeue(self, w: _Worker, outcome: int) -> None:
    if w.inflight:
      self._finish(w, w.inflight[0], outcome)
    self.pending.extendleft(reversed(w.inflight))
    w.inflight.clear()
    w.inflight_chars = 0

  def _on_death(self, i: int) -> None:
    w = self.pool._workers[i]  # pylint: disable=protected-access
    if not w.ready:
      self.start_failures += 1
      if self.start_failures > _MAX_START_FAILURES:
        raise RuntimeError(
            f"verifier workers keep dying during start-up (last exit code "
            f"{w.proc.exitcode}); check that math-verify imports in a fresh "
            f"process and that the launching script has a __main__ guard")
    elif w.inflight:
      # The item may have been innocent (the worker was killed from outside,
      # or died before reading it): retry once, then score it as an error.
      head = w.inflight[0]
      if head in self.crashed_once:
        self.counts.crashes += 1
        self._fail_head_and_requeue(w, worker_lib.ERROR)
      else:
        self.crashed_once.add(head)
        self.pending.extendleft(reversed(w.inflight))
        w.inflight.clear()
        w.inflight_chars = 0
    self.counts.restarts += 1
    self.pool._replace(i, kill=True)  # pylint: disable=protected-access

  def _enforce_deadlines(self) -> None:
    now = time.monotonic()
    for i, w in enumerate(self.pool._workers):  # pylint: disable=protected-access
      if w.deadline is not None and now > w.deadline:
        self.counts.hard_timeouts += 1
        self._fail_head_and_requeue(w, worker_lib.TIMEOUT)
        self.counts.restarts += 1
        self.pool._replace(i, kill=True)  # pylint: disable=protected-access
      elif not w.ready and now - w.started_at > _START_TIMEOUT_S:
        self._on_death(i)


def _close_live_pools() -> None:
  for pool in list(_live_pools):
    pool.close()


# At exit, before multiprocessing terminates and joins the children. Its exit
# function runs finalizers of priority >= 0 first, in the main process (from atexit)
# and in a process multiprocessing started (which ends without atexit). The workers
# ignore SIGTERM, so its `terminate()` alone would leave that join waiting forever.
mp_util.Finalize(None, _close_live_pools, exitpriority=10)
