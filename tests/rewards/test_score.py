"""Golden reward cases; expectations chosen by hand, not read off the code."""

import numpy as np
import pytest

from graft_jax import rewards

# (response, gold, expected reward)
GOLDEN = [
    # Equivalent forms.
    ("so the answer is \\boxed{0.5}", "\\frac12", 1.0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{0.75}", "\\frac{3}{4}", 1.0),
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 1.0),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),
    ("\\boxed{\\dfrac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", 1.0),
    ("\\boxed{1+x^2}", "x^2+1", 1.0),
    ("\\boxed{\\{2, 1\\}}", "\\{1,2\\}", 1.0),
    ("\\boxed{\\left(1, 2\\right]}", "(1,2]", 1.0),
    ("\\boxed{(-\\infty, 3)}", "(-\\infty,3)", 1.0),
    ("\\boxed{\\text{Monday}}", "\\text{Monday}", 1.0),
    ("\\boxed{\\textbf{(C)}}", "\\text{(C)}", 1.0),
    ("\\boxed{50\\%}", "50\\%", 1.0),
    ("\\boxed{85}", "\\boxed{85}", 1.0),           # gold already boxed
    ("\\boxed{-\\frac{3}{4}}", "-3/4", 1.0),
    # Wrong answers.
    ("\\boxed{13}", "12", 0.0),
    ("\\boxed{\\frac{1}{3}}", "0.5", 0.0),
    ("\\boxed{3\\sqrt{2}}", "2\\sqrt{2}", 0.0),
    ("\\boxed{[1,2]}", "(1,2]", 0.0),
    ("\\boxed{\\{1,3\\}}", "\\{1,2\\}", 0.0),
    ("\\boxed{\\text{Tuesday}}", "\\text{Monday}", 0.0),
    ("\\boxed{x^2-1}", "x^2+1", 0.0),
    # Nested braces and the *last* box.
    ("\\boxed{\\frac{\\sqrt{\\frac{1}{4}}}{1}}", "\\frac{1}{2}", 1.0),
    ("first \\boxed{3}, finally \\boxed{4}", "4", 1.0),
    ("first \\boxed{4}, finally \\boxed{3}", "4", 0.0),
]


def test_golden(pool):
  responses, golds, want = zip(*GOLDEN)
  got, stats = rewards.score(list(responses), list(golds), pool=pool)
  bad = [(r, g, w) for r, g, w, x in zip(responses, golds, want, got) if x != w]
  assert not bad, bad
  assert got.dtype == np.float32 and got.shape == (len(GOLDEN),)
  assert stats.total == len(GOLDEN) and stats.correct == sum(want)
  assert stats.timeouts == stats.errors == stats.no_boxed == 0
  assert 0 < stats.fast_path < stats.total


def test_no_box_falls_back_like_math_verify_and_is_counted(pool):
  responses = ["The final answer is $5$.", "I could not solve it.", ""]
  got, stats = rewards.score(responses, ["5", "5", "5"], pool=pool)
  np.testing.assert_array_equal(got, [1.0, 0.0, 0.0])
  assert stats.no_boxed == 3
  assert stats.parse_failures == 2
  got, stats = rewards.score(responses, ["5"] * 3, pool=pool, require_boxed=True)
  np.testing.assert_array_equal(got, [0.0, 0.0, 0.0])
  assert stats.no_boxed == 3 and stats.verified == 0


def test_empty_and_garbage_boxes_are_parse_failures(pool):
  got, stats = rewards.score(["\\boxed{}", "\\boxed{??}"], ["1", "1"], pool=pool)
  np.testing.assert_array_equal(got, [0.0, 0.0])
  assert stats.parse_failures == 2


def test_duplicates_are_verified_once(pool):
  got, stats = rewards.score(["\\boxed{\\sqrt{8}}"] * 8, ["2\\sqrt{2}"] * 8,
                             pool=pool)
  np.testing.assert_array_equal(got, np.ones(8))
  assert stats.verified == 1


def test_stats_add_up(pool):
  _, a = rewards.score(["\\boxed{1}"], ["1"], pool=pool)
  _, b = rewards.score(["x"], ["1"], pool=pool)
  total = a + b
  assert total.total == 2 and total.correct == 1 and total.no_boxed == 1


def test_bad_arguments(pool):
  with pytest.raises(ValueError, match="2 responses but 1 golds"):
    rewards.score(["a", "b"], ["1"], pool=pool)
  with pytest.raises(TypeError, match="item 0"):
    rewards.score([None], ["1"], pool=pool)
  with pytest.raises(ValueError, match="timeout_s"):
    rewards.score(["\\boxed{x}"], ["y"], pool=pool, timeout_s=0)


def test_default_pool_is_reused():
  got, _ = rewards.score(["\\boxed{\\frac{2}{4}}"], ["0.5"])
  assert got[0] == 1.0
  assert rewards.default_pool() is rewards.default_pool()
