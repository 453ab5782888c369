"""The toy's problem pools, disjoint by construction and checked at build.

Per family, one seeded draw of distinct problems is cut, in this order, into
RL prompts, held-out evaluation, and each model's warm-start set (traced
problems, then drills). RL comes first so that `make_synthetic(families, n,
seed=cfg.seed)` with n <= rl_per_family, what `configs/toy.py` trains on
when run without the toy job, is exactly a prefix of the RL pool. No problem is in two pools, so neither model has seen
an RL or evaluation problem, and the two warm starts share none either.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

from graft_jax.data import synthetic_columns as columns
from graft_jax.data.problem import Problem
from graft_jax.data.synthetic import make_synthetic


@dataclasses.dataclass(frozen=True)
class Pools:
  """Problems per use; `warm[i]` and `drill[i]` belong to model i (A = 0, B = 1)."""

  eval: list[Problem]
  rl: list[Problem]
  warm: tuple[list[Problem], list[Problem]]
  drill: tuple[list[Problem], list[Problem]]

  def named(self) -> dict[str, list[Problem]]:
    return {"eval": self.eval, "rl": self.rl, "warm_a": self.warm[0], "warm_b": self.warm[1],
            "drill_a": self.drill[0], "drill_b": self.drill[1]}


def check_disjoint(pools: dict[str, list[Problem]]) -> None:
  """Raises ValueError naming the first two pools that share a problem text."""
  texts = {name: {p.problem for p in probs} for name, probs in pools.items()}
  for (n1, t1), (n2, t2) in itertools.combinations(texts.items(), 2):
    shared = t1 & t2
    if shared:
      raise ValueError(f"toy pools {n1!r} and {n2!r} share {len(shared)} problems, "
                       f"e.g. {sorted(shared)[0]!r}")


def make_pools(cfg) -> Pools:
  """The pools of a `ToyPairConfig`, interleaved family by family within each."""
  sizes = [cfg.rl_per_family, cfg.eval_per_family, cfg.warm_per_family, cfg.drill_per_family,
           cfg.warm_per_family, cfg.drill_per_family]
  drawn = make_synthetic(list(cfg.families), sum(sizes), seed=cfg.seed,
                         difficulty=cfg.difficulty)
  k = len(cfg.families)
  cuts = list(itertools.accumulate([0, *sizes]))
  parts = [drawn[k * lo:k * hi] for lo, hi in zip(cuts, cuts[1:])]
  pools = Pools(rl=parts[0], eval=parts[1], warm=(parts[2], parts[4]),
                drill=(parts[3], parts[5]))
  check_disjoint(pools.named())
  return pools


def warm_rows(model_spec, pools: Pools, index: int, seed: int) -> list[tuple[str, str, str]]:
  """(problem, given, target) rows of model `index`'s warm start.

  The model reads the prompt, then `given` (context, not trained on), and
  learns to continue with `target`.

  Traced problems: for each family with prior p, exactly round(p * n) of its n
  problems (a seeded choice) get the correct procedure, the rest the buggy
  one; context is the problem, target the whole trace. Drills: every problem
  traced with both procedures, the strategy words moved into the context so
  they are never a target.
  """
  prior = dict(model_spec.competence)
  rows = []
  for family in dict.fromkeys(p.family for p in pools.warm[index]):
    probs = [p for p in pools.warm[index] if p.family == family]
    n_correct = round(prior[family] * len(probs))
    rng = random.Random(f"graft-toy-warm/{seed}/{index}/{family}")
    correct = set(rng.sample(range(len(probs)), n_correct))
    for i, p in enumerate(probs):
      rule = columns.CORRECT if i in correct else columns.BUGGY
      rows.append((p.problem, "", " " + columns.trace(family, *columns.operands(family, p.problem),
                                                   rule)[0]))
  for p in pools.drill[index]:
    for rule in columns.RULES:
      text = columns.trace(p.family, *columns.operands(p.family, p.problem), rule)[0]
      head, tail = text.split(":", 1)
      rows.append((p.problem, f" {head}:", tail))
  return rows
