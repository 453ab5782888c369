"""The shipped pair's rebuild check: which differences it accepts, and its bound."""

import math

import pytest

from graft_jax.toy import rebuild_check as rc

HERE = {"cpu": "GenuineIntel / Intel(R) Xeon(R) Processor / 6 / 207 / 2", "jaxlib": "0.10.2",
        "xla_flags": ""}


def test_bound_by_hand():
  # p_bar = 0.75: 4 * sqrt(2 * 0.75 * 0.25 / 1024) = 4 * 0.0191366 = 0.0765466
  assert rc.bound(0.74, 0.76, 1024) == pytest.approx(0.0765466, abs=1e-7)
  # Both zero: the floor p_bar = 1/1024 gives 4 * sqrt(2 * (1/1024) * (1023/1024) / 1024).
  assert rc.bound(0.0, 0.0, 1024) == pytest.approx(4 * math.sqrt(2 * 1023 / 1024**3), rel=1e-12)


def _table(add, mul, pass_add=0.7):
  return {"toy_a": {"strategy": {"cadd": add, "cmul": mul},
                    "families": {"cadd": pass_add, "cmul": mul}}}


def _check(differ, shipped_machine, comparisons=(), key="k"):
  return rc.RebuildCheck("k", key, tuple(differ), shipped_machine, HERE, tuple(comparisons))


def test_what_the_check_accepts():
  # Pass rates are shown, not bounded: they differ between builds by more than noise.
  same = rc.compare_tables(_table(0.74, 0.005), _table(0.75, 0.006, pass_add=0.5), 1024)
  far = rc.compare_tables(_table(0.74, 0.005), _table(0.60, 0.006), 1024)
  assert [(c.measure, c.ok) for c in same] == [("correct procedure", True)] * 2 + [
      ("pass rate", True)] * 2
  assert [c.ok for c in far] == [False, True, True, True]
  shown = rc.compare_tables(_table(0.74, 0.005), _table(0.75, 0.006), 1024)[2:]
  weights = ["model_a/model.safetensors"]
  assert _check([], HERE).ok  # bit for bit
  assert not _check([], HERE, key="other").ok  # another recipe
  assert not _check(["model_a/tokenizer.json"], None, same).ok  # no float goes into it
  assert not _check(weights, HERE, same).ok  # the same machine must give the same bits
  assert _check(weights, None, same).ok  # another processor, same competence
  assert not _check(weights, None, far).ok  # another processor, another pair
  assert not _check(weights, None, ()).ok  # nothing compared, nothing accepted
  assert not _check(weights, None, shown).ok  # pass rates alone prove nothing
  assert _check(weights, None, same).lines()[-1].startswith("reproduced: weights differ")
  assert _check(weights, None, far).lines()[-1] == "NOT reproduced"
