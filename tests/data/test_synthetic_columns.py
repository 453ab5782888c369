"""Column families: a correct and a buggy carry procedure in one trace format."""

import re

import pytest

from graft_jax.data import make_synthetic
from graft_jax.data import synthetic_columns as columns
from graft_jax.rewards import extract, score

_STEP = re.compile(r"(\d)([+*])(\d)\+(\d)=(\d+)\.")


def test_hand_worked_traces():
  # Worked by hand: 347+285 carries 1, 1 (tens) or 2, 4 (units of 12, 14).
  assert columns.trace("cadd", 347, 285, "correct") == (
      "carry up: 7+5+0=12. 4+8+1=13. 3+2+1=6. \\boxed{632}", "632")
  assert columns.trace("cadd", 347, 285, "buggy") == (
      "carry down: 7+5+0=12. 4+8+2=14. 3+2+4=9. \\boxed{942}", "942")
  # 347*6: 42 -> carry 4, 28 -> carry 2, 20; the bug carries 2 (of 42), then 6 (of 26).
  assert columns.trace("cmul", 347, 6, "correct") == (
      "carry down: 7*6+0=42. 4*6+4=28. 3*6+2=20. \\boxed{2082}", "2082")
  assert columns.trace("cmul", 347, 6, "buggy") == (
      "carry up: 7*6+0=42. 4*6+2=26. 3*6+6=24. \\boxed{2462}", "2462")
  with pytest.raises(ValueError, match="rule"):
    columns.trace("cadd", 1, 2, "tens")


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_buggy_traces_are_well_formed_boxed_and_wrong(difficulty):
  problems = make_synthetic(["cadd", "cmul"], 40, seed=difficulty, difficulty=difficulty)
  texts, golds = [], []
  for p in problems:
    a, b = columns.operands(p.family, p.problem)
    assert p.answer == str(a + b if p.family == "cadd" else a * b)  # plain Python
    good, bad = (columns.trace(p.family, a, b, r)[0] for r in columns.RULES)
    assert good == p.solution
    for text, rule in ((good, "correct"), (bad, "buggy")):
      assert text.startswith(f"carry {columns.word(p.family, rule)}: ")
      steps = _STEP.findall(text)
      assert len(steps) == len(str(a)) and text.count(".") == len(steps)
      prev = None
      for x, op, y, c, v in steps:  # every step is a true fact ...
        x, y, c, v = map(int, (x, y, c, v))
        assert (x + y if op == "+" else x * y) + c == v
        if prev is not None:  # ... and the carry is the rule's digit of the last value
          assert c == (prev // 10 if rule == "correct" else prev % 10)
        prev = v
      assert extract.last_boxed(text) is not None
    texts += [" " + good, " " + bad]
    golds += [p.answer, p.answer]
  rewards, stats = score(texts, golds, timeout_s=5.0)
  assert list(rewards[0::2]) == [1.0] * len(problems)  # the correct procedure is right
  assert list(rewards[1::2]) == [0.0] * len(problems)  # the bug: boxed, parsed, wrong
  assert stats.no_boxed == 0


def test_the_families_share_two_words_with_opposite_meanings():
  # A model's habitual word is right on one family and the bug on the other.
  assert columns.word("cadd", "correct") == columns.word("cmul", "buggy") == "up"
  assert columns.word("cadd", "buggy") == columns.word("cmul", "correct") == "down"
  # On the same digits, each word runs the same procedure whichever family names it.
  up_add = columns.run_columns("cadd", 347, 285, "correct")[0]
  up_mul = columns.run_columns("cmul", 347, 6, "buggy")[0]
  assert up_add[1] == "4+8+1=13" and up_mul[1] == "4*6+2=26"  # up: tens on cadd, units on cmul


def test_problem_text_round_trips():
  for family, a, b in (("cadd", 347, 285), ("cmul", 1203, 7)):
    assert columns.operands(family, columns.problem_text(family, a, b)) == (a, b)


# csub, the toy trio's third family (graft_jax.data.synthetic_borrow).
_SUB_STEP = re.compile(r"(\d+)-(\d)-(\d)=(\d)\.")


def test_csub_hand_worked_traces():
  from graft_jax.data import synthetic_borrow as borrow
  # 347-285 by hand: 7-5=2; 4<8 borrows: 14-8=6; 3-2-1=0 -> 62. Smaller from larger: 2, 4, 1.
  assert borrow.trace(347, 285, "correct") == (
      "borrow yes: 7-5-0=2. 14-8-0=6. 3-2-1=0. \\boxed{62}", "62")
  assert borrow.trace(347, 285, "buggy") == (
      "borrow no: 7-5-0=2. 8-4-0=4. 3-2-0=1. \\boxed{142}", "142")
  # 1000-1: every column borrows; the borrowed 0 becomes 10-0-1=9.
  assert borrow.trace(1000, 1, "correct")[0] == (
      "borrow yes: 10-1-0=9. 10-0-1=9. 10-0-1=9. 1-0-1=0. \\boxed{999}")
  assert borrow.operands(borrow.problem_text(347, 285)) == (347, 285)
  with pytest.raises(ValueError, match="rule"):
    borrow.trace(5, 2, "units")


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_csub_buggy_traces_are_well_formed_boxed_and_wrong(difficulty):
  import random

  from graft_jax.data import synthetic_borrow as borrow
  rng = random.Random(difficulty)
  texts, golds = [], []
  for _ in range(40):
    problem, answer, solution = borrow.generate(rng, difficulty)
    a, b = borrow.operands(problem)
    assert a > b and answer == str(a - b)  # plain Python
    good, bad = (borrow.trace(a, b, r)[0] for r in columns.RULES)
    assert good == solution
    for text, rule in ((good, "correct"), (bad, "buggy")):
      assert text.startswith(f"borrow {borrow.word(rule)}: ")
      steps = _SUB_STEP.findall(text)
      assert len(steps) == len(str(a)) and text.count(".") == len(steps)
      borrowed = 0
      xs, ys = str(a)[::-1], str(b)[::-1].ljust(len(str(a)), "0")
      for (top, y, c, v), x, want_y in zip(steps, xs, ys):
        top, y, c, v = map(int, (top, y, c, v))
        assert top - y - c == v and 0 <= v <= 9  # every step is a true fact
        if rule == "correct":  # the column's own digits, plus ten when it borrows
          assert (top % 10, y, c) == (int(x), int(want_y), borrowed)
          borrowed = int(top >= 10)
        else:  # the smaller digit taken from the larger, never a borrow
          assert {top, y} == {int(x), int(want_y)} and c == 0
      assert extract.last_boxed(text) is not None
    texts += [" " + good, " " + bad]
    golds += [answer, answer]
  rewards, stats = score(texts, golds, timeout_s=5.0)
  assert list(rewards[0::2]) == [1.0] * 40  # the correct procedure is right
  assert list(rewards[1::2]) == [0.0] * 40  # the bug: boxed, parsed, wrong
  assert stats.no_boxed == 0
