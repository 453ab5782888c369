"""Column arithmetic with two procedures: the toy's strategy-error families.

Two families, written as worked column traces in one shared format:

  cadd  Add 347 and 285.     carry up: 7+5+0=12. 4+8+1=13. 3+2+1=6. \\boxed{632}
  cmul  Multiply 347 by 6.   carry down: 7*6+0=42. 4*6+4=28. 3*6+2=20. \\boxed{2082}

The word after ``carry`` names the procedure, so a trace's strategy is chosen
by one early token and everything after it follows from that choice:

* correct: each column adds the tens digit of the previous column's value,
  c_i = floor(v_{i-1} / 10); the answer is the last column's value followed
  by the units digits of the others.
* buggy: each column adds the units digit instead, c_i = v_{i-1} mod 10.

The two families share the two words with opposite meanings: ``up`` is the
correct procedure on cadd and the bug on cmul, ``down`` the reverse. A model
whose habit is right on one family is therefore wrong on the other, and
sharpening the habit on its strong family cannot solve its weak one (with a
word per family and procedure, RL on the strong family taught the weak one:
a model trained on cmul wrote cmul's correct word on cadd and executed it).
Every step is still a true fact (x+y+c or x*y+c with c in 0..9) and the trace
is well-formed and boxed; only the carries, and so the answer, are wrong.

Both procedures practise the same single-digit facts inside traces, so a model
that has learned one can execute the other: what separates them is the
choice of procedure, not missing knowledge. Generators keep only problems on
which the bug changes the answer.
"""

from __future__ import annotations

import random

RULES = ("correct", "buggy")
CORRECT, BUGGY = RULES
# The strategy word of each rule, per family (correct first): shared words,
# opposite meanings, so a model's habit is right on one family only.
WORDS = {"cadd": ("up", "down"), "cmul": ("down", "up")}
_OPS = {"cadd": "+", "cmul": "*"}


def word(family: str, rule: str) -> str:
  """The strategy word that opens ``family``'s trace under ``rule``."""
  return WORDS[family][RULES.index(rule)]


def _columns(family: str, a: int, b: int) -> list[tuple[int, int]]:
  """The (x, y) digit pairs of each column, units first; y is b itself for cmul."""
  xs = [int(d) for d in reversed(str(a))]
  if family == "cmul":
    return [(x, b) for x in xs]
  ys = [int(d) for d in reversed(str(b))]
  ys += [0] * (len(xs) - len(ys))
  return list(zip(xs, ys))


def run_columns(family: str, a: int, b: int, rule: str) -> tuple[list[str], int]:
  """The per-column steps (``"4*6+4=28"``) and the boxed value under ``rule``.

  Column i computes v_i = x_i (op) y_i + c_i with c_0 = 0 and
  c_i = floor(v_{i-1}/10) (correct) or v_{i-1} mod 10 (buggy); the boxed
  value is the last v followed by the units digits of the earlier ones.
  """
  if rule not in RULES:
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
  op = _OPS[family]
  steps, units, carry = [], [], 0
  for x, y in _columns(family, a, b):
    v = (x + y if op == "+" else x * y) + carry
    steps.append(f"{x}{op}{y}+{carry}={v}")
    units.append(v % 10)
    carry = v // 10 if rule == CORRECT else v % 10
  digits = str(v) + "".join(str(u) for u in reversed(units[:-1]))
  return steps, int(digits)


def trace(family: str, a: int, b: int, rule: str) -> tuple[str, str]:
  """(worked trace, its boxed answer) of ``family``'s problem (a, b) under ``rule``."""
  steps, value = run_columns(family, a, b, rule)
  return f"carry {word(family, rule)}: " + " ".join(s + "." for s in steps) + f" \\boxed{{{value}}}", str(value)


def problem_text(family: str, a: int, b: int) -> str:
  return f"Add {a} and {b}." if family == "cadd" else f"Multiply {a} by {b}."


def operands(family: str, problem: str) -> tuple[int, int]:
  """(a, b) back from the problem text."""
  words = problem.rstrip(".").split()
  return int(words[1]), int(words[3])


def _generate(family: str, rng: random.Random, d: int) -> tuple[str, str, str]:
  # difficulty d -> (d + 1)-digit operands (cmul: times one digit 2..9)
  lo, hi = 10 ** d, 10 ** (d + 1) - 1
  while True:
    a = rng.randint(lo, hi)
    b = rng.randint(lo, hi) if family == "cadd" else rng.randint(2, 9)
    solution, answer = trace(family, a, b, CORRECT)
    if trace(family, a, b, BUGGY)[1] != answer:
      return problem_text(family, a, b), answer, solution


def gen_cadd(rng: random.Random, d: int) -> tuple[str, str, str]:
  return _generate("cadd", rng, d)


def gen_cmul(rng: random.Random, d: int) -> tuple[str, str, str]:
  return _generate("cmul", rng, d)
