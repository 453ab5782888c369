"""A push that cannot hang: every wait of a weight transfer polls under one deadline.

A blocking NCCL or CUDA call whose peer never comes (a server that died, or never
joined) would block the trainer forever, and inside a C call Python's signal
handlers never run, so a scheduler's stop warning could not save the run either.
The sender therefore never blocks in C: the communicator is made non-blocking,
and each wait is a short poll (`wait`) in the calling thread that checks the
peer's HTTP side and the deadline between polls. On a deadline, an NCCL error or
a failed HTTP call, `abort` (``ncclCommAbort``) ends whatever the transfer still
has in flight. A deadline or NCCL error raises ``SyncAborted``, one line and no
retry (a push that stalled once would stall again on the same server):
``VLLMEngine`` keeps it until the step in flight ends, and the trainer then
saves that step and stops. A failed HTTP call raises its own error, which
restarts a server that died.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable

POLL_S = 0.005  # short against a bucket's broadcast; a poll costs microseconds
DEFAULT_TIMEOUT_S = 120.0


class SyncAborted(RuntimeError):
  """A weight push that missed its deadline or lost its server; the transfer was aborted."""


class Deadline:
  """One push's time budget, shared by all its waits."""

  def __init__(self, seconds: float, what: str, *, clock: Callable[[], float] = time.monotonic):
    self.seconds, self.what, self._clock = float(seconds), what, clock
    self._end = clock() + self.seconds

  def left(self) -> float:
    return self._end - self._clock()

  def wait(self, done: Callable[[], bool], *, step: str, abort: Callable[[], None],
           peer: concurrent.futures.Future | None = None) -> None:
    """Polls `done()` until true. When the deadline passes first, or `done` raises (an
    NCCL error), calls `abort` and raises ``SyncAborted``. When `peer` (the server's HTTP
    call) fails first, calls `abort` and raises the peer's own error, so a server that
    died is restarted as after any request it failed (``VLLMEngine``)."""
    try:
      while True:
        if peer is not None and peer.done() and peer.exception() is not None:
          raise peer.exception()
        try:
          if done():
            return
        except Exception as e:  # pylint: disable=broad-except
          raise SyncAborted(f"{self.what}: {step} failed ({e}); the transfer was "
                            f"aborted") from e
        if self.left() <= 0:
          raise SyncAborted(f"{self.what}: {step} did not finish within {self.seconds:g} s "
                            f"(vllm.sync_timeout_s: the server never joined or stalled); "
                            f"the transfer was aborted")
        time.sleep(POLL_S)
    except BaseException:
      abort()
      raise
