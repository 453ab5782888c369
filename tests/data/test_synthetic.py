"""Synthetic tasks: seeded, sympy-verified, short, and separable by family."""

import fractions

import pytest

from graft_jax.data import (FAMILY_NAMES, SKILL_GROUPS, make_synthetic,
                            make_train_eval, split_problems)
from graft_jax.data import synthetic_families as fam
from graft_jax.rewards import extract

REQUIRED = {"add", "sub", "mul", "lin", "mod", "fracadd", "cmp"}


def test_required_families_exist():
  assert REQUIRED <= set(FAMILY_NAMES)


@pytest.mark.parametrize("difficulty", [1, 3, 5])
def test_seeded_determinism(difficulty):
  a = make_synthetic(FAMILY_NAMES, 20, seed=7, difficulty=difficulty)
  b = make_synthetic(FAMILY_NAMES, 20, seed=7, difficulty=difficulty)
  c = make_synthetic(FAMILY_NAMES, 20, seed=8, difficulty=difficulty)
  assert a == b
  assert [p.problem for p in a] != [p.problem for p in c]
  # A family's problems do not depend on which other families were asked for.
  alone = make_synthetic(["mul"], 20, seed=7, difficulty=difficulty)
  assert alone == [p for p in a if p.family == "mul"]


def _independent_answer(problem: str) -> fractions.Fraction:
  """Re-solves a problem with plain Python, independently of sympy and of
  the generators: a second opinion on every answer."""
  words = problem.rstrip(".?").split()
  if problem.startswith(("Add ", "Multiply ")):  # "Add 347 and 285." / "Multiply 347 by 6."
    x, y = int(words[1]), int(words[3])
    return fractions.Fraction(x + y if words[0] == "Add" else x * y)
  if problem.startswith("Which is larger"):
    return max(fractions.Fraction(words[3].rstrip(",")), fractions.Fraction(words[5]))
  if " mod " in problem:
    return fractions.Fraction(int(words[1]) % int(words[3]))
  if problem.startswith("Solve"):
    lhs, c = words[1].split("=")
    a, b = lhs.split("x")
    return fractions.Fraction(int(c) - int(b), int(a))
  expr = words[1]
  for op in "+*":
    if op in expr:
      x, y = expr.split(op)
      x, y = fractions.Fraction(x), fractions.Fraction(y)
      return x + y if op == "+" else x * y
  x, y = expr.split("-")
  return fractions.Fraction(int(x) - int(y))


@pytest.mark.parametrize("difficulty", [1, 2, 3, 4, 5])
def test_answers_are_right(difficulty):
  for p in make_synthetic(FAMILY_NAMES, 40, seed=difficulty, difficulty=difficulty):
    assert fractions.Fraction(p.answer) == _independent_answer(p.problem), p
    fam.check(p.family, p.problem, p.answer)  # the sympy check used at generation
    assert extract.last_boxed(p.solution) == p.answer
    assert p.solution.endswith(f"\\boxed{{{p.answer}}}")


def test_sympy_check_rejects_a_wrong_answer():
  with pytest.raises(ValueError, match="has answer 85"):
    fam.check("add", "Compute 47+38.", "84")
  with pytest.raises(ValueError, match="not in the family format"):
    fam.check("mul", "Compute 47+38.", "85")


def test_rows_are_short_ascii_math_format():
  for p in make_synthetic(FAMILY_NAMES, 30, seed=0, difficulty=5):
    assert p.problem.isascii() and p.solution.isascii()
    # Column traces spend one step per digit: 6 columns at difficulty 5.
    limit = 100 if p.family in ("cadd", "cmul") else 70
    assert len(p.problem) <= 40 and len(p.solution) <= limit, p
    assert p.source == "synthetic" and p.difficulty == 5 and len(p.id) == 16


def test_families_are_disjoint_and_recognizable():
  problems = make_synthetic(FAMILY_NAMES, 60, seed=3, difficulty=3)
  by_family = {}
  for p in problems:
    assert fam.family_of(p.problem) == p.family  # exactly one format matches
    by_family.setdefault(p.family, set()).add(p.problem)
  names = list(by_family)
  for i, a in enumerate(names):
    for b in names[i + 1:]:
      assert not by_family[a] & by_family[b]


def test_skill_groups_partition_the_families():
  groups = list(SKILL_GROUPS.values())
  assert not set(groups[0]) & set(groups[1])
  assert set(groups[0]) | set(groups[1]) == set(FAMILY_NAMES)


def test_train_eval_splits_do_not_overlap():
  train, evals = make_train_eval(["add", "lin"], 50, 10, seed=0, difficulty=2)
  assert len(train) == 100 and len(evals) == 20
  assert not {p.problem for p in train} & {p.problem for p in evals}
  assert not {p.id for p in train} & {p.id for p in evals}
  tr, ev = split_problems(train + evals, 30, seed=1)
  assert len(ev) == 30 and len(tr) == 90
  assert not {p.problem for p in tr} & {p.problem for p in ev}
  excluded = make_synthetic("add", 50, seed=0, difficulty=2,
                            exclude=[p.problem for p in evals])
  assert not {p.problem for p in excluded} & {p.problem for p in evals}


def test_bad_arguments():
  with pytest.raises(ValueError, match="unknown synthetic families"):
    make_synthetic(["add", "division"], 1, seed=0)
  with pytest.raises(ValueError, match="difficulty"):
    make_synthetic("add", 1, seed=0, difficulty=6)
  with pytest.raises(ValueError, match="only 100 distinct"):
    make_synthetic("add", 101, seed=0, difficulty=1)  # 10 x 10 sums exist
