"""The sign table: paired differences over seeds, their standard error, the paired t-test's p
and the verdict rule, checked on values worked by hand."""

import math

import numpy as np

from benchmarks.toy import sign_table as st


def _res(cells, seeds):
  return {"names": ["a", "b"], "cells": cells,
          "cell_seeds": {lab: {n: list(seeds[lab]) for n in per} for lab, per in cells.items()}}


def _p_closed_form(t: float, df: int) -> float:
  """Two-sided p from Student's t CDF in closed form for 2 and 4 degrees of freedom."""
  if df == 2:
    cdf = 0.5 + t / (2 * math.sqrt(2 + t * t))
  else:
    assert df == 4
    u = 1 + t * t / 4
    cdf = 0.5 + 3 / 8 * (t / math.sqrt(u)) * (1 - t * t / (12 * u))
  return 2 * (1 - cdf)


def test_p_value_matches_the_closed_form_t_distribution():
  # Three seeds: d = [.1, .1, .2], mean .4/3, SE sqrt(1/300)/sqrt(3) = 1/30, t = 4, df 2.
  d3 = np.array([0.1, 0.1, 0.2])
  m, se = st.mean_se(d3)
  assert math.isclose(m, 0.4 / 3) and math.isclose(se, 1 / 30)
  assert math.isclose(st.p_value(d3), _p_closed_form(4.0, 2), rel_tol=1e-9)
  assert math.isclose(_p_closed_form(4.0, 2), 1 - 4 / math.sqrt(18))  # 0.0572
  # Five seeds: d = [1, 2, 3, 4, 5] points -> mean 3, std sqrt(2.5), SE sqrt(0.5), t = 3 sqrt(2).
  d5 = np.array([0.01, 0.02, 0.03, 0.04, 0.05])
  assert math.isclose(st.p_value(d5), _p_closed_form(3 * math.sqrt(2), 4), rel_tol=1e-9)
  assert math.isclose(st.p_value(-d5), st.p_value(d5))
  assert st.p_value(np.array([0.1, 0.1])) == 0.0 and st.p_value(np.zeros(3)) == 1.0
  assert math.isnan(st.p_value(np.array([0.1])))


def test_pairs_by_seed_and_reads_the_rule():
  # GRAFT ran seeds 0, 1, 2; "no gate" ran 0 and 2 only: only those pair.
  res = _res({"GRAFT": {"a": [0.50, 0.60, 0.70], "b": [0.40, 0.40, 0.40]},
              "no gate": {"a": [0.40, 0.60], "b": [0.41, 0.39]}},
             {"GRAFT": [0, 1, 2], "no gate": [0, 2]})
  d = st.paired(res, "no gate", "a")
  np.testing.assert_allclose(d, [0.10, 0.10])  # 0.50-0.40 (seed 0), 0.70-0.60 (seed 2)
  # a: equal differences, p 0; b: d = [-0.01, 0.01], mean 0, p 1.
  assert st.verdict({n: st.paired(res, "no gate", n) for n in "ab"}) == "GRAFT ahead"


def test_two_se_is_not_enough_with_three_seeds():
  # t = 4 on three seeds (> 2 SE, the old rule) has p 0.057: not separated.
  d = {"a": np.array([0.1, 0.1, 0.2]), "b": np.array([0.0, 0.01, -0.01])}
  assert st.verdict(d) == "not separated"
  # The same t on five seeds (t = 3 sqrt(2), df 4) has p 0.013: ahead.
  d = {"a": np.array([0.01, 0.02, 0.03, 0.04, 0.05]), "b": np.array([0.0, 0.01, -0.01, 0, 0])}
  assert _p_closed_form(3 * math.sqrt(2), 4) < 0.05
  assert st.verdict(d) == "GRAFT ahead"
  assert st.verdict({n: -v for n, v in d.items()}) == "GRAFT behind"


def test_opposite_significant_signs_are_not_separated_and_one_seed_is_too_few():
  res = _res({"GRAFT": {"a": [0.5, 0.6, 0.7], "b": [0.3, 0.3, 0.3]},
              "SGT": {"a": [0.4, 0.5, 0.6], "b": [0.4, 0.41, 0.42]}},
             {"GRAFT": [0, 1, 2], "SGT": [0, 1, 2]})
  # a: d = [.1, .1, .1], p 0; b: d = [-.1, -.11, -.12], t = -.11 / .00577 = -19.05, p 0.0027.
  assert st.p_value(st.paired(res, "SGT", "b")) < 0.05
  assert st.verdict({n: st.paired(res, "SGT", n) for n in "ab"}) == "not separated"
  one = _res({"GRAFT": {"a": [0.5], "b": [0.5]}, "SGT": {"a": [0.1], "b": [0.1]}},
             {"GRAFT": [0], "SGT": [0]})
  assert st.verdict({n: st.paired(one, "SGT", n) for n in "ab"}) == "too few seeds"


def test_markdown_rows_and_the_two_claims():
  res = _res({"GRAFT": {"a": [0.60, 0.62], "b": [0.50, 0.55]},
              "GRPO n=8": {"a": [0.50, 0.60], "b": [0.40, 0.45]},
              "HACPO": {"a": [0.45, 0.55], "b": [0.45, 0.46]}},
             {"GRAFT": [0, 1], "GRPO n=8": [0, 1], "HACPO": [0, 1]})
  text = st.sign_markdown(res)
  # GRPO row, a: d = [.10, .02], mean 6.00 points, SE = |.10-.02|/2 = 4.00 points, t = 1.5
  # with 1 degree of freedom: p = 1 - 2 atan(1.5) / pi = 0.3743.
  assert f"{1 - 2 * math.atan(1.5) / math.pi:.3f}" == "0.374"
  assert ("| GRPO n=8 | +6.00 ± 4.00 (p 0.374) | +10.00 ± 0.00 (p 0.000) | 2 | GRAFT ahead |"
          in text)
  # The smallest margin over GRPO is 2 points (a, seed 1) < 3: not met.
  assert "on every seed and model: not met (smallest margin: a +2.00, b +10.00)" in text
  # HACPO - GRPO: a mean(-.05, -.05) = -5.00: below on a.
  assert "HACPO below GRPO n=8 on at least one model: met (HACPO − GRPO n=8: a -5.00, b +3.00)" in text
  assert "| no gate |" not in text  # rows without cells are left out
