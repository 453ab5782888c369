"""The verifier worker process: math-verify on one item at a time.

math-verify arms SIGALRM, which only works in a process's main thread, so it
runs here, in a single-threaded child, never in the trainer. The parent
(`pool.py`) owns the hard timeout; the interval timer here is only a cheaper
first line of defence that avoids killing and re-spawning the worker.

Wire protocol (multiprocessing Connection, pickled tuples):
  parent -> worker: (soft_timeout_s, [(item_id, gold_content, text, is_boxed),
    ...]), or None to stop. soft_timeout_s = 0 disarms the in-worker timer.
  worker -> parent: ("ready", pid) once after start-up, then lists of
    (item_id, outcome) in item order, flushed at least every `_FLUSH_S`.
"""

from __future__ import annotations

import logging
import signal
import time

# Outcome codes shared with the parent.
CORRECT = 0
WRONG = 1
TIMEOUT = 2
PARSE_FAIL = 3       # the prediction held no parseable answer
GOLD_PARSE_FAIL = 4  # the gold answer itself did not parse
ERROR = 5            # the worker raised or died on this item

_FLUSH_S = 0.005
# A run's stop signals (graft_jax.preemption.STOP_SIGNALS): a worker ignores
# them; the pool ends it by message or SIGKILL, and pipe EOF when the trainer dies.
IGNORED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
_CACHE_MAX = 50_000
_CACHE_MAX_CHARS = 512  # whole unboxed responses are unique: never cached
# One of each common answer shape: the first parse of a shape pays for
# ANTLR/sympy start-up, better spent before the worker reports ready.
_WARMUP = (("1", "1"), ("\\frac{1}{2}", "0.5"), ("2\\sqrt{2}", "\\sqrt{8}"),
           ("(1,2]", "[1,2]"), ("x^2+1", "1+x^2"), ("\\text{A}", "\\text{B}"))


class _SoftTimeout(BaseException):
  """Raised by the alarm. BaseException, so math-verify's ``except Exception``
  blocks cannot swallow it and report a timeout as a wrong answer."""


_armed = False


def _on_alarm(signum, frame):
  del signum, frame
  # A late alarm (after the item finished) must not hit the next item.
  if _armed:
    raise _SoftTimeout()


def _has_value(parsed) -> bool:
  """math-verify returns [sympy_expr, raw_str] or just [raw_str] on failure."""
  return any(not isinstance(x, str) for x in parsed)


class Checker:
  """Gold-vs-prediction check with per-process caches.

  Rollout batches repeat each gold n times and often repeat answers within a
  group, so caching parses and verdicts saves most of the sympy work.
  """

  def __init__(self):
    # Imported here, not at module level: the parent imports this module for
    # `worker_main` and the outcome codes only, and sympy is slow to import.
    from math_verify import parse, verify  # pylint: disable=import-outside-toplevel
    self._parse, self._verify = parse, verify
    self._gold = {}
    self._pred = {}
    self._verdict = {}

  def _cached(self, cache, key, fn, text: str):
    if len(text) > _CACHE_MAX_CHARS:
      return fn()
    if key not in cache:
      if len(cache) >= _CACHE_MAX:
        cache.clear()
      cache[key] = fn()
    return cache[key]

  def check(self, gold: str, text: str, is_boxed: bool) -> int:
    """Outcome code for one item; see the module docstring."""
    # Gold first and boxed: math-verify's verify() is not symmetric.
    gold_parsed = self._cached(
        self._gold, gold,
        lambda: self._parse("\\boxed{" + gold + "}", parsing_timeout=None),
        gold)
    if not gold_parsed:
      return GOLD_PARSE_FAIL
    pred_key = (text, is_boxed)
    pred_text = "\\boxed{" + text + "}" if is_boxed else text
    pred_parsed = self._cached(
        self._pred, pred_key,
        lambda: self._parse(pred_text, parsing_timeout=None), text)
    if not pred_parsed:
      return PARSE_FAIL
    ok = self._cached(
        self._verdict, (gold, pred_key),
        lambda: self._verify(gold_parsed, pred_parsed, timeout_seconds=None),
        gold + text)
    if ok:
      return CORRECT
    return WRONG if _has_value(pred_parsed) else PARSE_FAIL


def _check_with_alarm(checker: Checker, item, soft_timeout_s: float) -> int:
  global _armed
  _, gold, text, is_boxed = item
  try:
    if soft_timeout_s > 0:
      _armed = True
      signal.setitimer(signal.ITIMER_REAL, soft_timeout_s)
    try:
      return checker.check(gold, text, is_boxed)
    finally:
      _armed = False
      signal.setitimer(signal.ITIMER_REAL, 0)
  except _SoftTimeout:
    return TIMEOUT
  except Exception:  # pylint: disable=broad-except
    logging.getLogger(__name__).debug("verifier error", exc_info=True)
    return ERROR


def worker_main(conn) -> None:
  """Entry point of a worker process; returns when the parent sends None."""
  # math-verify warns once per process that its own timeout is off; ours is on.
  logging.getLogger("math_verify").setLevel(logging.ERROR)
  signal.signal(signal.SIGALRM, _on_alarm)
  # Ctrl-C and a scheduler's stop signals belong to the trainer, which finishes its
  # step (scores included) and then tears the pool down itself; SLURM signals every
  # process of a job step, and a worker dying here would score its items as crashes.
  for signum in IGNORED_SIGNALS:
    signal.signal(signum, signal.SIG_IGN)
  checker = Checker()
  for gold, pred in _WARMUP:
    checker.check(gold, pred, True)
  conn.send(("ready", None))
  while True:
    try:
      msg = conn.recv()
    except EOFError:
      return
    if msg is None:
      return
    soft_timeout_s, chunk = msg
    out = []
    last_flush = time.monotonic()
    for item in chunk:
      out.append((item[0], _check_with_alarm(checker, item, soft_timeout_s)))
      now = time.monotonic()
      if now - last_flush >= _FLUSH_S:
        conn.send(out)
        out = []
        last_flush = now
    if out:
      conn.send(out)
