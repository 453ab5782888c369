"""HACPO capability tracker against hand-computed rolling rates and ratios."""

import json

import pytest

from graft_jax.train import capability


def test_before_any_step():
  t = capability.CapabilityTracker(['a', 'b'])
  assert t.success_rate('a') is None and t.ratio('a', 'b') == 1.0


def test_rolling_window_by_hand():
  t = capability.CapabilityTracker(['a', 'b'], window=3)
  # Step 1: P_a = 1/4, P_b = 2/4.
  assert t.update({'a': [1, 0, 0, 0], 'b': [1, 1, 0, 0]}) == {
      'a': 0.25, 'b': 0.5}
  assert t.ratio('a', 'b') == pytest.approx(0.5)
  assert t.ratio('b', 'a') == pytest.approx(2.0)
  # Step 2: P_a = (0.25 + 0) / 2 = 0.125, P_b = (0.5 + 1) / 2 = 0.75.
  t.update({'a': [0, 0, 0, 0], 'b': [1, 1, 1, 1]})
  assert t.success_rate('a') == pytest.approx(0.125)
  assert t.success_rate('b') == pytest.approx(0.75)
  assert t.ratio('a', 'b') == pytest.approx(1 / 6)
  assert t.ratio('b', 'a') == pytest.approx(6.0)
  # Step 3: P_a = 0.5 / 3, P_b = 2.5 / 3.
  t.update({'a': [1, 0, 0, 0], 'b': [1, 1, 1, 1]})
  assert t.ratio('a', 'b') == pytest.approx(0.2)
  assert t.ratio('b', 'a') == pytest.approx(5.0)
  # Step 4 drops step 1: P_a = 0.25 / 3 = 1/12, P_b = 3 / 3; the raw ratios
  # 1/12 and 12 clamp to 0.1 and 10.
  t.update({'a': [0, 0, 0, 0], 'b': [1, 1, 1, 1]})
  assert t.success_rate('a') == pytest.approx(1 / 12)
  assert t.success_rate('b') == pytest.approx(1.0)
  assert t.ratio('a', 'b') == 0.1 and t.ratio('b', 'a') == 10.0
  assert t.steps == 4


def test_rates_are_per_step_means_and_rewards_above_zero_count():
  t = capability.CapabilityTracker(['a', 'b'], window=5)
  # Unequal counts per step: mean of per-step rates (1/3 and 1), not pooled.
  t.update({'a': [0.5, 0.0, -1.0], 'b': [1]})
  t.update({'a': [1.0], 'b': [0, 0]})
  assert t.success_rate('a') == pytest.approx((1 / 3 + 1) / 2)
  assert t.success_rate('b') == pytest.approx(0.5)


def test_zero_success():
  t = capability.CapabilityTracker(['a', 'b'])
  t.update({'a': [0, 0], 'b': [0, 0]})
  assert t.ratio('a', 'b') == 1.0
  t = capability.CapabilityTracker(['a', 'b'])
  t.update({'a': [1, 0], 'b': [0, 0]})
  assert t.ratio('a', 'b') == 10.0 and t.ratio('b', 'a') == 0.1


def test_checkpoint_round_trip_continues_identically():
  t = capability.CapabilityTracker(['a', 'b'], window=2, ratio_clamp=(0.2, 5))
  t.update({'a': [1, 0], 'b': [1, 1]})
  t.update({'a': [0, 0], 'b': [1, 0]})
  state = json.loads(json.dumps(t.to_dict()))
  u = capability.CapabilityTracker.from_dict(state)
  assert u.to_dict() == t.to_dict()
  for tracker in (t, u):
    tracker.update({'a': [1, 1], 'b': [0, 1]})
  assert u.ratio('a', 'b') == t.ratio('a', 'b') == pytest.approx(
      (0 + 1) / 2 / ((0.5 + 0.5) / 2))


def test_bad_input():
  with pytest.raises(ValueError, match='window must be >= 1'):
    capability.CapabilityTracker(['a', 'b'], window=0)
  with pytest.raises(ValueError, match='ratio_clamp'):
    capability.CapabilityTracker(['a', 'b'], ratio_clamp=(2, 10))
  t = capability.CapabilityTracker(['a', 'b'])
  with pytest.raises(ValueError, match='exactly'):
    t.update({'a': [1]})
  with pytest.raises(ValueError, match="rewards of 'b' must be non-empty"):
    t.update({'a': [1], 'b': []})
  assert t.steps == 0 and t.success_rate('a') is None
