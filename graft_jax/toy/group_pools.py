"""Pools and warm-start rows of a toy group (K >= 3 models), disjoint and checked at build.

The pair's rules (`graft_jax.toy.pools`), generalised to K models and to the
subtraction family `csub` (`graft_jax.data.synthetic_borrow`): per family one
seeded draw of distinct problems is cut, in order, into RL prompts, held-out
evaluation, then each model's traced warm-start set and its drills. No
problem is in two pools (`pools.check_disjoint`). The pair's own pools are
untouched by this module (its shipped build hashes `pools.py`).
"""

from __future__ import annotations

import itertools
import random

from graft_jax.data import synthetic_borrow as borrow
from graft_jax.data import synthetic_columns as columns
from graft_jax.data.problem import Problem, stable_id
from graft_jax.data.synthetic import SOURCE, make_synthetic
from graft_jax.toy import pools as pair_pools


def draw_csub(n: int, *, seed: int, difficulty: int) -> list[Problem]:
  """``n`` distinct ``csub`` problems, seeded like `make_synthetic` (one rng per family)."""
  rng = random.Random(f"graft-synthetic/{seed}/{borrow.FAMILY}/{difficulty}")
  out, seen = [], set()
  for _ in range(50 * n):
    if len(out) == n:
      break
    problem, answer, solution = borrow.generate(rng, difficulty)
    if problem in seen:
      continue
    seen.add(problem)
    a, b = borrow.operands(problem)
    if answer != str(a - b):  # the trace's answer against plain subtraction
      raise ValueError(f"csub: {problem!r} has answer {a - b}, not {answer!r}")
    out.append(Problem(id=stable_id(SOURCE, problem), problem=problem, answer=answer,
                       source=SOURCE, solution=solution, family=borrow.FAMILY,
                       difficulty=difficulty))
  if len(out) < n:
    raise ValueError(f"csub at difficulty {difficulty} yielded only {len(out)} distinct "
                     f"problems, {n} requested")
  return out


def draw(families, n: int, *, seed: int, difficulty: int) -> list[Problem]:
  """``n`` problems of each family, interleaved family by family (as `make_synthetic`)."""
  per_family = [draw_csub(n, seed=seed, difficulty=difficulty) if f == borrow.FAMILY
                else make_synthetic([f], n, seed=seed, difficulty=difficulty) for f in families]
  return [p for row in zip(*per_family) for p in row]


def named(pools: pair_pools.Pools, names) -> dict[str, list[Problem]]:
  """{pool name: problems}, each model's warm start and drills under its name."""
  out = {"eval": pools.eval, "rl": pools.rl}
  for name, warm, drill in zip(names, pools.warm, pools.drill):
    out[f"warm_{name}"], out[f"drill_{name}"] = warm, drill
  return out


def make_pools(cfg) -> pair_pools.Pools:
  """The pools of a `ToyGroupConfig`: `warm[i]` and `drill[i]` belong to `cfg.models[i]`."""
  k = len(cfg.models)
  sizes = [cfg.rl_per_family, cfg.eval_per_family,
           *[cfg.warm_per_family, cfg.drill_per_family] * k]
  drawn = draw(cfg.families, sum(sizes), seed=cfg.seed, difficulty=cfg.difficulty)
  n_fam = len(cfg.families)
  cuts = list(itertools.accumulate([0, *sizes]))
  parts = [drawn[n_fam * lo:n_fam * hi] for lo, hi in zip(cuts, cuts[1:])]
  pools = pair_pools.Pools(rl=parts[0], eval=parts[1], warm=tuple(parts[2::2]),
                           drill=tuple(parts[3::2]))
  pair_pools.check_disjoint(named(pools, [m.name for m in cfg.models]))
  return pools


def _subset(pools: pair_pools.Pools, index: int, keep) -> pair_pools.Pools:
  """Model `index`'s warm and drill problems whose family satisfies `keep`, at `index`."""
  pick = lambda probs: [p for p in probs if keep(p.family)]
  pad = ([],) * index
  return pair_pools.Pools(eval=[], rl=[], warm=(*pad, pick(pools.warm[index])),
                          drill=(*pad, pick(pools.drill[index])))


def warm_rows(model_spec, pools: pair_pools.Pools, index: int,
              seed: int) -> list[tuple[str, str, str]]:
  """(problem, given, target) rows of model `index`'s warm start, as `pools.warm_rows`.

  The carry families go through `pools.warm_rows` itself; `csub` follows the
  same rule: round(p * n) of its n traced problems (a seeded choice) get the
  correct procedure, and every drill problem is traced with both, the
  strategy word given as context.
  """
  rows = pair_pools.warm_rows(model_spec, _subset(pools, index, lambda f: f in columns.WORDS),
                              index, seed)
  own = _subset(pools, index, lambda f: f == borrow.FAMILY)
  probs = own.warm[index]
  rng = random.Random(f"graft-toy-warm/{seed}/{index}/{borrow.FAMILY}")
  correct = set(rng.sample(range(len(probs)),
                           round(dict(model_spec.competence)[borrow.FAMILY] * len(probs))))
  for i, p in enumerate(probs):
    rule = columns.CORRECT if i in correct else columns.BUGGY
    rows.append((p.problem, "", " " + borrow.trace(*borrow.operands(p.problem), rule)[0]))
  for p in own.drill[index]:
    for rule in borrow.RULES:
      head, tail = borrow.trace(*borrow.operands(p.problem), rule)[0].split(":", 1)
      rows.append((p.problem, f" {head}:", tail))
  return rows


def strategy_prefix(family: str, rule: str) -> str:
  """How a trace of ``family`` under ``rule`` opens (``carry up:``, ``borrow yes:``)."""
  if family == borrow.FAMILY:
    return f"borrow {borrow.word(rule)}:"
  return f"carry {columns.word(family, rule)}:"
