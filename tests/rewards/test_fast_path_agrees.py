"""The sympy-free fast path must never disagree with math-verify itself."""

import fractions

from hypothesis import given, settings, strategies as st
from math_verify import parse, verify

from graft_jax.rewards import extract

_ints = st.integers(-10**9 + 1, 10**9 - 1)
_dens = st.integers(1, 10**9 - 1)


def _math_verify(gold: str, pred: str) -> bool:
  # No wall-clock timeouts: on a loaded machine math-verify's default 5 s alarm
  # turns into a False verdict, and these short answers cannot hang sympy.
  box = lambda s: parse("\\boxed{" + s + "}", parsing_timeout=None)
  return verify(box(gold), box(pred), timeout_seconds=None)


@st.composite
def literal(draw, near=None):
  """A numeric literal in one of the forms the fast path reads."""
  value = near if near is not None else fractions.Fraction(draw(_ints), draw(_dens))
  if draw(st.booleans()):  # sometimes a nearby, different value
    value += fractions.Fraction(draw(st.integers(-3, 3)), draw(st.integers(1, 7)))
  form = draw(st.sampled_from(["int", "frac", "slash", "dec"]))
  if form == "int" or value.denominator == 1:
    return str(round(value))
  sign = "-" if value < 0 else ""
  num, den = abs(value.numerator), value.denominator
  if den >= 10**9 or num >= 10**9:
    return str(round(value))
  if form == "frac":
    return f"{sign}\\frac{{{num}}}{{{den}}}"
  if form == "slash":
    return f"{sign}{num}/{den}"
  return f"{float(value):.6f}".rstrip("0").rstrip(".")


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_fast_decision_matches_math_verify(data):
  gold = data.draw(literal())
  base = extract.numeric_literal(gold)
  pred = data.draw(literal(near=base[0] if base else None))
  decision = extract.fast_decision(gold, pred)
  if decision is None:
    return
  want = _math_verify(gold, pred)
  assert decision == want, (gold, pred)


_SHAPES = ["(1, 2]", "\\{1, 2\\}", "x^2 + 1", "\\frac{\\sqrt{3}}{2}",
           "\\text{Monday}", "2\\sqrt{2}", "-\\frac{3}{4}", "\\pi r^2", "1,000",
           "(3, -1)", "\\infty", "3 \\text{ cm}"]


def _variants(s: str):
  yield s
  yield s.replace(" ", "")
  yield s.replace("+", " + ").replace("-", " - ")
  yield "$" + s + "$."
  yield s.replace("(", "\\left(").replace("]", "\\right]").replace(")", "\\right)")
  yield s.replace("\\frac", "\\dfrac")
  yield s.replace(",", ",\\,")


def test_normal_form_matches_are_math_verify_matches():
  for gold in _SHAPES:
    for pred in _variants(gold):
      if extract.fast_decision(gold, pred) is True:
        assert _math_verify(gold, pred), (gold, pred)
