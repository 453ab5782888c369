"""The batched binary reward: response text + gold answer -> 0/1, with counts.

For each response: take the last complete ``\\boxed{...}``; if the verdict is
certain without sympy (identical after value-preserving normalization, or two
numeric literals compared the way math-verify compares them) decide it here;
otherwise send it to the verifier pool, which
runs ``math_verify.verify(parse(\\boxed{gold}), parse(pred))``. A response with
no box falls back to math-verify's own extraction on the whole text (its
"answer is ..." / last-LaTeX / last-number rules) unless ``require_boxed``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Sequence

import numpy as np

from graft_jax.rewards import extract
from graft_jax.rewards import pool as pool_lib
from graft_jax.rewards import worker as worker_lib

DEFAULT_TIMEOUT_S = 5.0  # math-verify's own default per comparison

_default_pool: pool_lib.VerifierPool | None = None
_default_lock = threading.Lock()


@dataclasses.dataclass
class ScoreStats:
  """Counts for one `score` call (add them up across calls with `+`).

  ``no_boxed`` responses are still scored through the fallback; every
  ``timeouts`` / ``errors`` / ``parse_failures`` item scored 0.
  """
  total: int = 0
  correct: int = 0
  no_boxed: int = 0
  parse_failures: int = 0       # no parseable answer in the response
  gold_parse_failures: int = 0  # the gold itself did not parse: a data bug
  timeouts: int = 0             # soft (in-worker) plus hard (worker killed)
  hard_timeouts: int = 0
  errors: int = 0               # verifier raised or its worker crashed
  worker_restarts: int = 0
  fast_path: int = 0            # decided without sympy
  verified: int = 0             # distinct items sent to math-verify
  seconds: float = 0.0

  def __add__(self, other: "ScoreStats") -> "ScoreStats":
    return ScoreStats(**{
        f.name: getattr(self, f.name) + getattr(other, f.name)
        for f in dataclasses.fields(self)})

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


def default_pool() -> pool_lib.VerifierPool:
  """The module-level pool, created on first use, closed at exit."""
  global _default_pool
  with _default_lock:
    if _default_pool is None or _default_pool._closed:  # pylint: disable=protected-access
      _default_pool = pool_lib.VerifierPool()
    return _default_pool


def score(responses: Sequence[str], golds: Sequence[str], *,
          timeout_s: float = DEFAULT_TIMEOUT_S,
          pool: pool_lib.VerifierPool | None = None,
          require_boxed: bool = False) -> tuple[np.ndarray, ScoreStats]:
  """Binary rewards for ``responses[b]`` against ``golds[b]``.

  Args:
    responses: B response texts.
    golds: B gold answers, bare (``3/4``) or boxed (``\\boxed{3/4}``).
    timeout_s: per-item verification budget; past it the item scores 0 and is
      counted in ``stats.timeouts``.
    pool: the verifier pool to use; defaults to `default_pool()`.
    require_boxed: score responses without a box 0 instead of falling back.

  Returns:
    ``(rewards_B, stats)``: float32 array of 0/1 and a `ScoreStats`.
  """
  if len(responses) != len(golds):
    raise ValueError(f"score: {len(responses)} responses but {len(golds)} golds")
  start = time.perf_counter()
  stats = ScoreStats(total=len(responses))
  rewards_B = np.zeros(len(responses), np.float32)
  # Identical (gold, answer) pairs are verified once: groups repeat answers.
  todo: dict[tuple[str, str, bool], list[int]] = {}
  for b, (response, gold) in enumerate(zip(responses, golds)):
    if not isinstance(response, str) or not isinstance(gold, str):
      raise TypeError(f"score: item {b} is not (str, str): "
                      f"({type(response).__name__}, {type(gold).__name__})")
    gold_c = extract.gold_content(gold)
    boxed = extract.last_boxed(response)
    if boxed is None:
      stats.no_boxed += 1
      if not require_boxed:
        todo.setdefault((gold_c, response, False), []).append(b)
      continue
    decision = extract.fast_decision(gold_c, boxed)
    if decision is None:
      todo.setdefault((gold_c, boxed, True), []).append(b)
    else:
      stats.fast_path += 1
      rewards_B[b] = float(decision)
  if todo:
    keys = list(todo)
    outcomes, counts = (pool or default_pool()).run(keys, timeout_s=timeout_s)
    stats.verified = len(keys)
    stats.hard_timeouts = counts.hard_timeouts
    stats.worker_restarts = counts.restarts
    for key, outcome in zip(keys, outcomes):
      rows = todo[key]
      _count(stats, outcome, len(rows))
      if outcome == worker_lib.CORRECT:
        rewards_B[rows] = 1.0
  stats.correct = int(rewards_B.sum())
  stats.seconds = time.perf_counter() - start
  return rewards_B, stats


# Why a gold is quarantined, by the outcome of checking it against itself.
GOLD_PROBLEMS = {
    worker_lib.GOLD_PARSE_FAIL: "unparseable",
    worker_lib.TIMEOUT: "timeout",
    worker_lib.ERROR: "verifier_error",
    worker_lib.WRONG: "not_self_equal",
    worker_lib.PARSE_FAIL: "not_self_equal",
}
# A number to compare each gold with: responses are mostly numbers, and a gold
# like 9^{9^{9^{9}}} only hangs sympy once it is compared with one.
_PROBE = "0"


def check_golds(golds: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                pool: pool_lib.VerifierPool | None = None) -> list[str | None]:
  """Checks each distinct gold once, as scoring will use it: math-verify must parse it,
  accept it as its own answer, and compare it with a number, each within ``timeout_s``.

  A gold that fails can never be matched the way responses are scored (it
  scores every response 0, or costs a verifier timeout on every response to
  its problem), so the caller sets its problem aside once at load instead of
  paying for it every epoch. Integers, fractions and short decimals are
  decided by the fast path and skip the pool.

  Returns:
    Per gold, None when usable, else the reason: one of `GOLD_PROBLEMS`' values.
  """
  todo: dict[str, list[int]] = {}
  for i, gold in enumerate(golds):
    content = extract.gold_content(gold)
    if extract.numeric_literal(extract.normalize_for_match(content)) is None:
      todo.setdefault(content, []).append(i)
  out: list[str | None] = [None] * len(golds)
  if not todo:
    return out
  keys = list(todo)
  items = [(g, g, True) for g in keys] + [(g, _PROBE, True) for g in keys]
  outcomes, _ = (pool or default_pool()).run(items, timeout_s=timeout_s)
  for k, key in enumerate(keys):
    itself, probe = outcomes[k], outcomes[len(keys) + k]
    reason = GOLD_PROBLEMS.get(itself)
    if reason is None and probe in (worker_lib.TIMEOUT, worker_lib.ERROR):
      reason = GOLD_PROBLEMS[probe]
    for i in todo[key]:
      out[i] = reason
  return out


def _count(stats: ScoreStats, outcome: int, n: int) -> None:
  if outcome == worker_lib.TIMEOUT:
    stats.timeouts += n
  elif outcome == worker_lib.PARSE_FAIL:
    stats.parse_failures += n
  elif outcome == worker_lib.GOLD_PARSE_FAIL:
    stats.gold_parse_failures += n
  elif outcome == worker_lib.ERROR:
    stats.errors += n
