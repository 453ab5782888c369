"""The reward a run uses, by name (``reward.kind``): ``(texts, golds) -> (rewards_B, stats)``.

``math_verify``: ``graft_jax.rewards.score`` (last box, then math-verify in a
worker pool); ``synthetic_exact``: ``graft_jax.rewards.exact.exact_score``;
``pkg.module:function``: a function of your own with the same contract,
imported by that path.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Callable

import numpy as np

from graft_jax.rewards import exact
from graft_jax.rewards.score import DEFAULT_TIMEOUT_S, score

KINDS = ("math_verify", "synthetic_exact")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")

RewardFn = Callable[[list, list], tuple]


class RewardError(ValueError):
  """A reward that cannot be imported, or that broke its contract; names ``reward.kind``."""


def kind_problem(kind: str) -> str | None:
  """Why ``kind`` cannot name a reward (without importing anything), or None."""
  if kind in KINDS or _DOTTED.match(kind):
    return None
  return f"must be one of {', '.join(KINDS)} or a dotted path pkg.module:function, got {kind!r}"


def uses_verifier_pool(kind: str) -> bool:
  return kind == "math_verify"


def import_reward(spec: str) -> Callable:
  """The function ``pkg.module:function`` names."""
  module_name, _, fn_name = spec.partition(":")
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise RewardError(f"reward.kind {spec!r}: cannot import {module_name!r} "
                      f"({type(e).__name__}: {e})") from e
  fn = getattr(module, fn_name, None)
  if not callable(fn):
    raise RewardError(f"reward.kind {spec!r}: {module_name} has no function {fn_name!r}")
  return fn


def _checked(spec: str, fn: Callable, texts, golds):
  """Calls a reward of your own and checks it returned ``(rewards, stats)``, one per text."""
  out = fn(texts, golds)
  if not (isinstance(out, tuple) and len(out) == 2):
    raise RewardError(f"reward.kind {spec!r} must return (rewards, stats), got "
                      f"{type(out).__name__}")
  rewards = np.asarray(out[0], np.float32)
  if rewards.shape != (len(texts),):
    raise RewardError(f"reward.kind {spec!r} must return {len(texts)} finite rewards, got "
                      f"shape {rewards.shape}")
  bad = np.flatnonzero(~np.isfinite(rewards))
  if bad.size:
    raise RewardError(f"reward.kind {spec!r} must return finite rewards, got "
                      f"{rewards[bad[0]]} for text {bad[0]} ({bad.size} of {len(texts)} "
                      f"non-finite)")
  return rewards, out[1]


def make_reward(kind: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                pool=None) -> RewardFn:
  """The reward ``kind`` names; ``timeout_s`` and ``pool`` apply to ``math_verify``."""
  if kind == "math_verify":
    return functools.partial(score, timeout_s=timeout_s, pool=pool)
  if kind == "synthetic_exact":
    return exact.exact_score
  problem = kind_problem(kind)
  if problem:
    raise RewardError(f"reward.kind {problem}")
  return functools.partial(_checked, kind, import_reward(kind))
