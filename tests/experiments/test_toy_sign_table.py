"""The sign table: paired differences over seeds, their standard error, and the verdict rule,
checked on values worked by hand."""

import math

import numpy as np

from graft_jax.experiments import toy_sign_table as st


def _res(cells, seeds):
  return {"names": ["a", "b"], "cells": cells,
          "cell_seeds": {lab: {n: list(seeds[lab]) for n in per} for lab, per in cells.items()}}


def test_pairs_by_seed_and_reads_the_rule():
  # GRAFT ran seeds 0, 1, 2; "no gate" ran 0 and 2 only: only those pair.
  res = _res({"GRAFT": {"a": [0.50, 0.60, 0.70], "b": [0.40, 0.40, 0.40]},
              "no gate": {"a": [0.40, 0.60], "b": [0.41, 0.39]}},
             {"GRAFT": [0, 1, 2], "no gate": [0, 2]})
  d = st.paired(res, "no gate", "a")
  np.testing.assert_allclose(d, [0.10, 0.10])  # 0.50-0.40 (seed 0), 0.70-0.60 (seed 2)
  m, se = st.mean_se(d)
  assert math.isclose(m, 0.10) and se == 0.0
  # a: d = [0.1, 0.1] > 2 SE; b: d = [-0.01, 0.01], mean 0, SE 0.01: within noise.
  assert st.verdict({n: st.paired(res, "no gate", n) for n in "ab"}) == "GRAFT ahead"


def test_opposite_signs_beyond_noise_are_mixed_and_one_seed_is_too_few():
  res = _res({"GRAFT": {"a": [0.5, 0.6, 0.7], "b": [0.3, 0.3, 0.3]},
              "SGT": {"a": [0.4, 0.5, 0.5], "b": [0.4, 0.41, 0.42]}},
             {"GRAFT": [0, 1, 2], "SGT": [0, 1, 2]})
  # a: d = [.1, .1, .2], mean .1333, SE = std([.1,.1,.2], ddof=1)/sqrt(3) = .0577/1.732 = .0333
  m, se = st.mean_se(st.paired(res, "SGT", "a"))
  assert math.isclose(m, 0.4 / 3) and math.isclose(se, math.sqrt(1 / 300) / math.sqrt(3))
  # b: d = [-.1, -.11, -.12], mean -.11, SE .00577: GRAFT behind there.
  assert st.verdict({n: st.paired(res, "SGT", n) for n in "ab"}) == "mixed"
  one = _res({"GRAFT": {"a": [0.5], "b": [0.5]}, "SGT": {"a": [0.1], "b": [0.1]}},
             {"GRAFT": [0], "SGT": [0]})
  assert st.verdict({n: st.paired(one, "SGT", n) for n in "ab"}) == "too few seeds"


def test_markdown_rows_and_the_two_claims():
  res = _res({"GRAFT": {"a": [0.60, 0.62], "b": [0.50, 0.55]},
              "GRPO n=8": {"a": [0.50, 0.60], "b": [0.40, 0.45]},
              "HACPO": {"a": [0.45, 0.55], "b": [0.45, 0.46]}},
             {"GRAFT": [0, 1], "GRPO n=8": [0, 1], "HACPO": [0, 1]})
  text = st.sign_markdown(res)
  # GRPO row, a: d = [.10, .02], mean 6.00 points, SE = |.10-.02|/2 = 4.00 points.
  assert "| GRPO n=8 | +6.00 ± 4.00 | +10.00 ± 0.00 | 2 | GRAFT ahead |" in text
  # The smallest margin over GRPO is 2 points (a, seed 1) < 3: not met.
  assert "on every seed and model: not met (smallest margin: a +2.00, b +10.00)" in text
  # HACPO - GRPO: a mean(-.05, -.05) = -5.00: below on a.
  assert "HACPO below GRPO n=8 on at least one model: met (HACPO − GRPO n=8: a -5.00, b +3.00)" in text
  assert "| no gate |" not in text  # rows without cells are left out
