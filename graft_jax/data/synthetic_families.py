"""Synthetic task families: short ASCII problems with exact answers.

Each family has its own problem format (so a problem's family can be read off
its text, and two toy models can be taught disjoint skills), a generator with
a difficulty knob 1..5, and a sympy reference solver that re-derives the
answer from the problem *text*, independently of the generator's arithmetic.

Worked solutions split the numbers by place value, so each step is a small
table lookup and the model need not carry in one shot. Formats (difficulty 2):
  add      Compute 47+38.              47+38=40+30+7+8=70+15=85. \\boxed{85}
  sub      Compute 93-58.              93-58=90-50+3-8=40-5=35. \\boxed{35}
  mul      Compute 23*7.               23*7=20*7+3*7=140+21=161. \\boxed{161}
  lin      Solve 3x+5=20.              3x=20-5=15. x=15/3=5. \\boxed{5}
  mod      Compute 347 mod 9.          347=38*9+5. \\boxed{5}
  fracadd  Compute 1/3+1/6.            1/3+1/6=2/6+1/6=3/6=1/2. \\boxed{1/2}
  cmp      Which is larger, 47 or 52?  52>47. \\boxed{52}

Two more families, ``cadd`` and ``cmul`` (column traces with a correct and a
buggy carry procedure, difficulty d = (d+1)-digit operands), live in
`graft_jax.data.synthetic_columns`; the toy pair is built on them.
"""

from __future__ import annotations

import dataclasses
import fractions
import math
import random
import re
from typing import Callable

import sympy

from graft_jax.data import synthetic_columns as columns

MIN_DIFFICULTY, MAX_DIFFICULTY = 1, 5
_MUL_DIGITS = {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 2), 5: (3, 3)}


@dataclasses.dataclass(frozen=True)
class Family:
  """generate(rng, difficulty) -> (problem, answer, solution);
  reference(match of pattern) -> the exact answer as a sympy number."""

  name: str
  pattern: re.Pattern
  generate: Callable[[random.Random, int], tuple[str, str, str]]
  reference: Callable[[re.Match], sympy.Expr]


def _digits(rng: random.Random, d: int) -> int:
  return rng.randint(10 ** (d - 1) if d > 1 else 0, 10 ** d - 1)


def _frac_str(x: fractions.Fraction) -> str:
  return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _tens(x: int) -> tuple[int, int]:
  """x as (tens part, units), e.g. 47 -> (40, 7), -47 -> (-40, -7)."""
  units = int(math.copysign(abs(x) % 10, x))
  return x - units, units


def _gen_add(rng, d):
  a, b = _digits(rng, d), _digits(rng, d)
  work = f"{a}+{b}="
  if max(a, b) >= 10:
    (a1, a0), (b1, b0) = _tens(a), _tens(b)
    work += f"{a1}+{b1}+{a0}+{b0}={a1 + b1}+{a0 + b0}="
  return f"Compute {a}+{b}.", str(a + b), f"{work}{a + b}. \\boxed{{{a + b}}}"


def _gen_sub(rng, d):
  a, b = _digits(rng, d), _digits(rng, d)
  if d <= 2 and a < b:  # negative results only from difficulty 3 on
    a, b = b, a
  work = f"{a}-{b}="
  if max(a, b) >= 10:
    (a1, a0), (b1, b0) = _tens(a), _tens(b)
    work += f"{a1}-{b1}+{a0}-{b0}={a1 - b1}{_signed(a0 - b0)}="
  return f"Compute {a}-{b}.", str(a - b), f"{work}{a - b}. \\boxed{{{a - b}}}"


def _gen_mul(rng, d):
  da, db = _MUL_DIGITS[d]
  a, b = _digits(rng, da), _digits(rng, db)
  work = f"{a}*{b}="
  if db == 1 and a >= 10:
    a1, a0 = _tens(a)
    work += f"{a1}*{b}+{a0}*{b}={a1 * b}+{a0 * b}="
  elif db > 1:
    b1, b0 = _tens(b)
    work += f"{a}*{b1}+{a}*{b0}={a * b1}+{a * b0}="
  return f"Compute {a}*{b}.", str(a * b), f"{work}{a * b}. \\boxed{{{a * b}}}"


def _signed(b: int) -> str:
  return f"+{b}" if b >= 0 else f"-{-b}"


def _gen_lin(rng, d):
  a = rng.randint(2, 3 + 2 * d)
  x = rng.randint(-5 * d, 5 * d) if d >= 3 else rng.randint(0, 5 * d)
  b = rng.randint(-10 * d, 10 * d) if d >= 2 else rng.randint(1, 10)
  c = a * x + b
  rhs = f"{c}{_signed(-b)}"  # c-b written out, e.g. "20-5" or "10+5"
  solution = f"{a}x={rhs}={c - b}. x={c - b}/{a}={x}. \\boxed{{{x}}}"
  return f"Solve {a}x{_signed(b)}={c}.", str(x), solution


def _gen_mod(rng, d):
  a, m = _digits(rng, d + 1), rng.randint(2, 5 + 5 * d)
  q, r = divmod(a, m)
  return f"Compute {a} mod {m}.", str(r), f"{a}={q}*{m}+{r}. \\boxed{{{r}}}"


def _gen_fracadd(rng, d):
  hi = 2 + 3 * d
  q, s = rng.randint(2, hi), rng.randint(2, hi)
  p, r = rng.randint(1, q - 1), rng.randint(1, s - 1)
  lcm = q * s // math.gcd(q, s)
  total = fractions.Fraction(p, q) + fractions.Fraction(r, s)
  num = p * lcm // q + r * lcm // s
  steps = f"{p}/{q}+{r}/{s}"
  if q != lcm or s != lcm:  # bring both to the common denominator first
    steps += f"={p * lcm // q}/{lcm}+{r * lcm // s}/{lcm}"
  steps += f"={num}/{lcm}"
  if _frac_str(total) != f"{num}/{lcm}":
    steps += f"={_frac_str(total)}"
  answer = _frac_str(total)
  return f"Compute {p}/{q}+{r}/{s}.", answer, f"{steps}. \\boxed{{{answer}}}"


def _gen_cmp(rng, d):
  if d <= 2:
    a, b = rng.sample(range(10 ** d, 10 ** (d + 1)), 2)
    big, small = max(a, b), min(a, b)
    return (f"Which is larger, {a} or {b}?", str(big),
            f"{big}>{small}. \\boxed{{{big}}}")
  while True:  # two different fractions in lowest terms
    q, s = rng.randint(2, 3 * d), rng.randint(2, 3 * d)
    x = fractions.Fraction(rng.randint(1, q - 1), q)
    y = fractions.Fraction(rng.randint(1, s - 1), s)
    if x != y and x.denominator > 1 and y.denominator > 1:
      break
  lcm = x.denominator * y.denominator // math.gcd(x.denominator, y.denominator)
  big, small = max(x, y), min(x, y)
  solution = (f"{_frac_str(big)}={big.numerator * lcm // big.denominator}/{lcm}"
              f">{_frac_str(small)}={small.numerator * lcm // small.denominator}"
              f"/{lcm}. \\boxed{{{_frac_str(big)}}}")
  return (f"Which is larger, {_frac_str(x)} or {_frac_str(y)}?",
          _frac_str(big), solution)


def _num(text: str) -> sympy.Rational:
  """A sympy rational from an integer or ``a/b`` literal in problem text."""
  num, _, den = text.partition("/")
  return sympy.Rational(int(num), int(den or 1))


def _ref_lin(m: re.Match) -> sympy.Expr:
  # a*x + b = c solved for x: the inverse of how the generator built c.
  x = sympy.Symbol("x")
  a, b, c = _num(m["a"]), _num(m["b"]), _num(m["c"])
  (root,) = sympy.solve_linear(a * x + b - c, symbols=[x])[1:]
  return root


_INT = r"-?\d+"
_NUM = r"\d+(?:/\d+)?"
_FRAC = r"\d+/\d+"
FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("add", re.compile(r"Compute (?P<a>\d+)\+(?P<b>\d+)\."), _gen_add,
           lambda m: _num(m["a"]) + _num(m["b"])),
    Family("sub", re.compile(r"Compute (?P<a>\d+)-(?P<b>\d+)\."), _gen_sub,
           lambda m: _num(m["a"]) - _num(m["b"])),
    Family("mul", re.compile(r"Compute (?P<a>\d+)\*(?P<b>\d+)\."), _gen_mul,
           lambda m: _num(m["a"]) * _num(m["b"])),
    Family("lin", re.compile(
        rf"Solve (?P<a>\d+)x(?P<b>[+-]\d+)=(?P<c>{_INT})\."), _gen_lin, _ref_lin),
    Family("mod", re.compile(r"Compute (?P<a>\d+) mod (?P<m>\d+)\."), _gen_mod,
           lambda m: sympy.Mod(_num(m["a"]), _num(m["m"]))),
    Family("fracadd", re.compile(rf"Compute (?P<a>{_FRAC})\+(?P<b>{_FRAC})\."),
           _gen_fracadd, lambda m: _num(m["a"]) + _num(m["b"])),
    Family("cmp", re.compile(rf"Which is larger, (?P<a>{_NUM}) or (?P<b>{_NUM})\?"),
           _gen_cmp, lambda m: sympy.Max(_num(m["a"]), _num(m["b"]))),
    Family("cadd", re.compile(r"Add (?P<a>\d+) and (?P<b>\d+)\."), columns.gen_cadd,
           lambda m: _num(m["a"]) + _num(m["b"])),
    Family("cmul", re.compile(r"Multiply (?P<a>\d+) by (?P<b>\d+)\."), columns.gen_cmul,
           lambda m: _num(m["a"]) * _num(m["b"])),
]}


def family_of(problem: str) -> str | None:
  """The family whose format the problem text matches, or None."""
  names = [n for n, f in FAMILIES.items() if f.pattern.fullmatch(problem)]
  return names[0] if len(names) == 1 else None


def check(family: str, problem: str, answer: str) -> None:
  """Raises ValueError unless sympy, solving the problem text, gets answer."""
  m = FAMILIES[family].pattern.fullmatch(problem)
  if m is None:
    raise ValueError(f"{family}: problem {problem!r} is not in the family format")
  want = FAMILIES[family].reference(m)
  if want != _num(answer):  # exact: both are sympy rationals
    raise ValueError(f"{family}: {problem!r} has answer {want}, not {answer!r}")
