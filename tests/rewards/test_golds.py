"""Golds are checked once at load: unparseable or pathological ones are quarantined by id."""

import logging
import time

from graft_jax import rewards
from graft_jax.data import Problem
from graft_jax.train import run_inputs

# Parses, but comparing it with any number makes sympy evaluate a huge power.
TOWER = "9^{9^{9^{9}}}"


def test_check_golds_names_the_unusable_ones(pool):
  golds = ["x^2+1", TOWER, "}{", "\\text{(C)}", "\\boxed{12}", "\\frac{3}{4}", "(1, 2]", "x^2+1"]
  start = time.perf_counter()
  got = rewards.check_golds(golds, timeout_s=1.0, pool=pool)
  assert got == [None, "timeout", "unparseable", None, None, None, None, None]
  assert time.perf_counter() - start < 20  # one timeout for the tower, not one per copy


def test_numeric_golds_never_reach_the_pool(pool):
  class Spy:
    calls = 0

    def run(self, items, *, timeout_s):
      Spy.calls += 1
      return pool.run(items, timeout_s=timeout_s)

  assert rewards.check_golds(["12", "-3", "\\frac{1}{2}", "0.25", "$7$"], pool=Spy()) == [None] * 5
  assert Spy.calls == 0


def test_quarantine_logs_problem_ids_and_counts_by_reason(pool, caplog):
  problems = [Problem(f"p{i}", f"q{i}", a, "t") for i, a in
              enumerate(["1", TOWER, "}{", "x+1", TOWER])]
  with caplog.at_level(logging.WARNING):
    kept, counts = run_inputs.quarantine_golds(problems, pool=pool, timeout_s=1.0,
                                               source="train.jsonl")
  assert [p.id for p in kept] == ["p0", "p3"]
  assert counts == {"gold_quarantined/timeout": 2, "gold_quarantined/unparseable": 1}
  assert ("train.jsonl: quarantined 2 problem(s) whose gold answer cannot be compared within "
          "the timeout" in caplog.text)
  assert "ids: p1, p4" in caplog.text and "ids: p2" in caplog.text
