"""Answer extraction and the sympy-free fast path, run in the parent process.

Everything here is pure string work (no sympy), so it is cheap enough to run on
every response before anything is sent to a verifier worker.
"""

from __future__ import annotations

import fractions
import re

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_MAX_BOX_TRIES = 8
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
# Literals the fast path understands. Bounded sizes keep every distinct pair
# far apart relative to math-verify's 15-digit numeric comparison; leading
# zeros are left to math-verify.
_INT = r"(?:0|[1-9]\d{0,8})"
_RATIONAL = re.compile(
    rf"(?P<s>-?)(?:(?P<i>{_INT})"
    rf"|\\frac\{{(?P<fn>-?{_INT})\}}\{{(?P<fd>{_INT})\}}"
    rf"|(?P<sn>{_INT})/(?P<sd>{_INT}))")
_DECIMAL = re.compile(r"-?(?:0|[1-9]\d{0,8})\.\d{1,6}")
# Spacing commands and fraction variants that never change a value; removing
# them from both sides keeps an exact-match decision exact.
_SPACING = re.compile(r"\\[,!;:]|\\quad|\\qquad")
_FRAC_VARIANTS = re.compile(r"\\[dt]frac")
# \left( and \right] only size a delimiter (\leftarrow is left alone).
_SIZING = re.compile(r"\\(?:left|right)(?![a-zA-Z])")
# Whitespace is dropped unless it separates two letters/digits, where it can
# end a command (\pi r), separate words in \text{}, or mean a product (2 3),
# or follows a comma ("1, 000" may be a pair, "1,000" a thousand).
_WHITESPACE = re.compile(r"\s+")
_LOOSE_SPACE = re.compile(r"(?<![a-zA-Z0-9,])\s+|\s+(?![a-zA-Z0-9])")


def _match_braces(text: str, open_pos: int) -> int | None:
  """Index of the ``}`` closing the ``{`` at ``open_pos``; None if unbalanced.

  Backslash-escaped braces (``\\{``, ``\\}``) are content, not delimiters.
  """
  depth = 0
  # The regex skips ordinary characters at C speed; Python sees only braces.
  for m in _BRACE_TOKEN.finditer(text, open_pos):
    tok = m.group()
    if tok == "{":
      depth += 1
    elif tok == "}":
      depth -= 1
      if depth == 0:
        return m.start()
  return None


def last_boxed(text: str) -> str | None:
  """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``).

  Nested braces are matched. A box left open (e.g. a truncated generation) is
  skipped in favour of the previous complete one, as math-verify does; only
  the last `_MAX_BOX_TRIES` boxes are tried, so degenerate repetitive text
  ("\\boxed{\\boxed{...") costs linear time, not quadratic.
  Returns None when no complete box is found.
  """
  end = len(text)
  for _ in range(_MAX_BOX_TRIES):
    start = max(text.rfind(cmd, 0, end) for cmd in _BOX_COMMANDS)
    if start < 0:
      return None
    cmd_len = 6 if text.startswith("\\boxed", start) else 5
    j = start + cmd_len
    while j < len(text) and text[j] == " ":
      j += 1
    if j < len(text) and text[j] == "{":
      close = _match_braces(text, j)
      if close is not None:
        return text[j + 1:close]
    end = start
  return None


def strip_math_delimiters(answer: str) -> str:
  """Removes surrounding whitespace and ``$...$`` from a bare answer string."""
  s = answer.strip()
  while len(s) >= 2 and s[0] == "$" and s[-1] == "$":
    s = s[1:-1].strip()
  return s


def gold_content(gold: str) -> str:
  """The gold answer without any ``\\boxed{}`` wrapper or ``$`` delimiters."""
  s = strip_math_delimiters(gold)
  inner = last_boxed(s)
  return strip_math_delimiters(inner) if inner is not None else s


def normalize_for_match(answer: str) -> str:
  """A value-preserving normal form used only to detect identical answers."""
  s = strip_math_delimiters(answer.strip().rstrip("."))
  s = _SPACING.sub(" ", s)
  s = _FRAC_VARIANTS.sub(r"\\frac", s)
  s = _SIZING.sub("", s)
  s = _WHITESPACE.sub(" ", s).strip()
  s = _LOOSE_SPACE.sub("", s)
  return s.rstrip(".")


def numeric_literal(s: str) -> tuple[fractions.Fraction, bool] | None:
  """(value, exact) of a plain integer, fraction or short decimal, else None.

  ``exact`` is False for decimals: math-verify compares those after rounding,
  so only their equality (not their inequality) is certain here.
  """
  m = _RATIONAL.fullmatch(s)
  if m:
    sign = -1 if m["s"] else 1
    if m["i"] is not None:
      return fractions.Fraction(sign * int(m["i"])), True
    num, den = (m["fn"], m["fd"]) if m["fn"] is not None else (m["sn"], m["sd"])
    if int(den) == 0:
      return None
    return fractions.Fraction(sign * int(num), int(den)), True
  if _DECIMAL.fullmatch(s):
    return fractions.Fraction(s), False
  return None


def fast_decision(gold: str, pred: str) -> bool | None:
  """Decides gold-vs-pred without sympy when the verdict is certain, else None.

  Args:
    gold: the gold answer content (no box).
    pred: the extracted boxed content of the response.

  Returns:
    True when both normalize to the same string (math-verify accepts
    identical answers) or are numeric literals of the same value; False when
    both are exact rationals (integers, ``a/b``, ``\\frac{a}{b}``) of
    different value, which is math-verify's rule for two rationals; None
    otherwise, meaning: ask math-verify. Agreement with math-verify is a test.
  """
  g = normalize_for_match(gold)
  p = normalize_for_match(pred)
  if g and g == p:
    return True
  gv, pv = numeric_literal(g), numeric_literal(p)
  if gv is None or pv is None:
    return None
  if gv[0] == pv[0]:
    return True
  if gv[1] and pv[1]:
    return False
  return None
