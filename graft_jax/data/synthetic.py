"""Seeded synthetic verifiable problem sets for the embedded default and tests.

`make_synthetic(["add", "mul"], 100, seed=0, difficulty=2)` gives 100 distinct
problems of each family, each answer re-derived by sympy from the problem text
before it is returned. `SKILL_GROUPS` splits the families into two disjoint
halves, for two toy models with complementary skills.
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

from graft_jax.data import synthetic_families as fam
from graft_jax.data.problem import Problem, stable_id

SOURCE = "synthetic"
FAMILY_NAMES = tuple(fam.FAMILIES)
# Additive vs multiplicative skills: disjoint, and together all families.
SKILL_GROUPS = {
    "additive": ("add", "sub", "fracadd", "cmp", "cadd"),
    "multiplicative": ("mul", "mod", "lin", "cmul"),
}
_MAX_TRIES_PER_ITEM = 50


def _check_args(families: Sequence[str], difficulty: int) -> None:
  unknown = [f for f in families if f not in fam.FAMILIES]
  if unknown:
    raise ValueError(f"unknown synthetic families {unknown}; known: {FAMILY_NAMES}")
  if not fam.MIN_DIFFICULTY <= difficulty <= fam.MAX_DIFFICULTY:
    raise ValueError(f"difficulty must be in [{fam.MIN_DIFFICULTY}, "
                     f"{fam.MAX_DIFFICULTY}], got {difficulty}")


def _family_problems(family: str, n: int, seed: int, difficulty: int,
                     exclude: set[str]) -> list[Problem]:
  # A string seed is hashed with sha512 by `random`: stable across runs and
  # independent of PYTHONHASHSEED and of which other families are requested.
  rng = random.Random(f"graft-synthetic/{seed}/{family}/{difficulty}")
  out, seen = [], set(exclude)
  for _ in range(_MAX_TRIES_PER_ITEM * n):
    if len(out) == n:
      break
    problem, answer, solution = fam.FAMILIES[family].generate(rng, difficulty)
    if problem in seen:
      continue
    seen.add(problem)
    fam.check(family, problem, answer)  # sympy, from the problem text
    out.append(Problem(id=stable_id(SOURCE, problem), problem=problem,
                       answer=answer, source=SOURCE, solution=solution,
                       family=family, difficulty=difficulty))
  if len(out) < n:
    raise ValueError(
        f"synthetic family {family!r} at difficulty {difficulty} yielded only "
        f"{len(out)} distinct problems, {n} requested; raise the difficulty")
  return out


def make_synthetic(families: str | Iterable[str], n: int, *, seed: int,
                   difficulty: int = 1,
                   exclude: Iterable[str] = ()) -> list[Problem]:
  """``n`` distinct problems of each family, interleaved family by family.

  Args:
    families: family names (see `FAMILY_NAMES`), or one name.
    n: problems per family.
    seed: the same seed gives the same problems.
    difficulty: 1 (one-digit numbers) to 5.
    exclude: problem texts that must not be generated (e.g. an eval set).
  """
  families = [families] if isinstance(families, str) else list(families)
  _check_args(families, difficulty)
  per_family = [_family_problems(f, n, seed, difficulty, set(exclude))
                for f in families]
  return [p for row in zip(*per_family) for p in row]


def make_train_eval(families: str | Iterable[str], n_train: int, n_eval: int,
                    *, seed: int, difficulty: int = 1
                    ) -> tuple[list[Problem], list[Problem]]:
  """Train and held-out eval sets with no problem in common (per family)."""
  both = make_synthetic(families, n_train + n_eval, seed=seed,
                        difficulty=difficulty)
  families = [families] if isinstance(families, str) else list(families)
  k = len(families)
  # Rows are interleaved by family, so slicing whole rows keeps the mix.
  return both[: n_train * k], both[n_train * k:]


def split_problems(problems: Sequence[Problem], n_eval: int, *, seed: int
                   ) -> tuple[list[Problem], list[Problem]]:
  """Shuffles and splits into (train, eval) with no shared id or text.

  Repeated problem texts are kept together on one side.
  """
  texts = sorted({p.problem for p in problems})
  if n_eval > len(texts):
    raise ValueError(f"n_eval={n_eval} but only {len(texts)} distinct problems")
  random.Random(f"graft-split/{seed}").shuffle(texts)
  held_out = set(texts[:n_eval])
  train = [p for p in problems if p.problem not in held_out]
  evals = [p for p in problems if p.problem in held_out]
  return train, evals
