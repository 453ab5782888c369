"""The toy's problems as its models read them: the pools of a config and the prompt text.

Both the pair's build (graft_jax.toy.pair) and its skill table read these, so they sit
below both.
"""

from __future__ import annotations

import functools

from graft_jax.data.problem import Problem
from graft_jax.toy import group_pools
from graft_jax.toy import pools as pools_lib
from graft_jax.toy import spec as spec_lib


def prompt_text(problem: str) -> str:
  return problem + spec_lib.PROMPT_SUFFIX


def response_text(solution: str) -> str:
  return " " + solution


@functools.lru_cache(maxsize=4)
def make_pools(cfg: spec_lib.ToyPairConfig) -> pools_lib.Pools:
  """The config's disjoint pools (cached: drawing them re-checks every answer with sympy)."""
  if isinstance(cfg, spec_lib.ToyGroupConfig):
    return group_pools.make_pools(cfg)
  return pools_lib.make_pools(cfg)


def eval_problems(cfg: spec_lib.ToyPairConfig) -> list[Problem]:
  """Held-out problems of every family (in no warm start and no RL pool)."""
  return make_pools(cfg).eval

