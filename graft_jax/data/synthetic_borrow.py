"""Column subtraction with a correct and a buggy procedure: the toy trio's third family.

One family, ``csub``, in the column-trace format of
`graft_jax.data.synthetic_columns` (which the shipped toy pair hashes into its
cache key, so this family lives beside it rather than in it):

  csub  Subtract 285 from 347.   borrow yes: 7-5-0=2. 14-8-0=6. 3-2-1=0. \\boxed{62}
                                 borrow no: 7-5-0=2. 8-4-0=4. 3-2-0=1. \\boxed{142}

The word after ``borrow`` names the procedure, chosen by one early token:

* correct (``yes``): column i computes v_i = x_i + 10 r_i - y_i - b_i with
  b_0 = 0, r_i = 1 when x_i - b_i < y_i (borrow) and b_{i+1} = r_i; the step
  is written ``(x_i + 10 r_i)-y_i-b_i=v_i``.
* buggy (``no``), the classic "smaller from larger": v_i = |x_i - y_i|, no
  borrow ever; the step is written ``max-min-0=v_i``.

The answer is the digits v_i, most significant first (leading zeros dropped).
Every step is a true fact (a subtraction within 19) and the trace is
well-formed and boxed; only the answer is wrong under the bug. The words
``yes``/``no`` mean nothing on the carry families, so a model's habit on
``csub`` neither solves nor breaks ``cadd``/``cmul`` and vice versa.
Generators keep only problems on which the bug changes the answer (at least
one column needs a borrow).
"""

from __future__ import annotations

import random

from graft_jax.data import synthetic_columns as columns

FAMILY = "csub"
RULES = columns.RULES  # ("correct", "buggy")
WORDS = {FAMILY: ("yes", "no")}  # correct first, as in synthetic_columns.WORDS


def word(rule: str) -> str:
  """The strategy word that opens a ``csub`` trace under ``rule``."""
  if rule not in RULES:
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
  return WORDS[FAMILY][RULES.index(rule)]


def run_columns(a: int, b: int, rule: str) -> tuple[list[str], int]:
  """The per-column steps (``"14-8-0=6"``) and the boxed value of a - b under ``rule``."""
  word(rule)  # validates the rule
  xs = [int(d) for d in reversed(str(a))]
  ys = [int(d) for d in reversed(str(b))] + [0] * (len(str(a)) - len(str(b)))
  steps, digits, borrow = [], [], 0
  for x, y in zip(xs, ys):
    if rule == columns.CORRECT:
      top = x + 10 if x - borrow < y else x
      v = top - y - borrow
      steps.append(f"{top}-{y}-{borrow}={v}")
      borrow = int(top > x)
    else:
      v = abs(x - y)
      steps.append(f"{max(x, y)}-{min(x, y)}-0={v}")
    digits.append(v)
  return steps, int("".join(str(d) for d in reversed(digits)))


def trace(a: int, b: int, rule: str) -> tuple[str, str]:
  """(worked trace, its boxed answer) of a - b under ``rule``."""
  steps, value = run_columns(a, b, rule)
  return f"borrow {word(rule)}: " + " ".join(s + "." for s in steps) + f" \\boxed{{{value}}}", str(value)


def problem_text(a: int, b: int) -> str:
  return f"Subtract {b} from {a}."


def operands(problem: str) -> tuple[int, int]:
  """(a, b) of a - b back from the problem text."""
  words = problem.rstrip(".").split()
  return int(words[3]), int(words[1])


def generate(rng: random.Random, d: int) -> tuple[str, str, str]:
  """(problem, answer, correct trace): two (d + 1)-digit operands, a > b, at least one borrow."""
  lo, hi = 10 ** d, 10 ** (d + 1) - 1
  while True:
    a, b = rng.randint(lo, hi), rng.randint(lo, hi)
    if a <= b:
      continue
    solution, answer = trace(a, b, columns.CORRECT)
    if trace(a, b, columns.BUGGY)[1] != answer:
      return problem_text(a, b), answer, solution
