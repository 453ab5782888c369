"""A metric combines by the reducer its loss declared, whatever its name says."""

import numpy as np

from graft_jax.outputs import metric_kinds as kinds
from graft_jax.outputs.step_metrics import update_metrics


def part(reducer, **values):
  return kinds.metrics(reducer, **{k: np.float32(v) for k, v in values.items()})


def test_a_step_combines_each_metric_by_its_reducer():
  # Names chosen to mislead a rule by suffix: "_tokens" is a fraction here, "_max" a mean.
  ran = [{**part(kinds.FRACTION, odd_tokens=0.25), **part(kinds.MEAN, spread_max=2.0),
          **part(kinds.SUM, total=3.0), **part(kinds.MAX, peak=5.0)},
         {**part(kinds.FRACTION, odd_tokens=0.5), **part(kinds.MEAN, spread_max=1.0),
          **part(kinds.SUM, total=4.0), **part(kinds.MAX, peak=7.0),
          **part(kinds.SUM, rows_run=6, silent_rows=1)}]
  silent = [{**part(kinds.FRACTION, odd_tokens=0.0), **part(kinds.MEAN, spread_max=0.0),
             **part(kinds.SUM, total=1.0), **part(kinds.MAX, peak=9.0),
             **part(kinds.SUM, rows_run=0, silent_rows=4)}]
  out = update_metrics([ran, silent])
  assert out["odd_tokens"] == 0.75  # the ran update's calls added, over the 1 update that ran
  assert out["spread_max"] == 1.5  # 3 over both updates
  assert out["total"] == 8.0 and out["rows_run"] == 6 and out["silent_rows"] == 5
  assert out["peak"] == 7.0  # of the updates that ran
  assert out["minibatch_updates"] == 2


def test_pooled_counts_give_the_clip_fractions_and_stay_out_of_the_log():
  one = {**part(kinds.POOLED, own_tokens=10, own_clipped=2, graft_tokens=4, graft_clipped=0),
         **part(kinds.SUM, rows_run=3)}
  two = {**part(kinds.POOLED, own_tokens=30, own_clipped=1, graft_tokens=0, graft_clipped=0),
         **part(kinds.SUM, rows_run=2)}
  out = update_metrics([[one], [two]])
  assert out["clip_frac_own"] == 3 / 40 and out["clip_frac_graft"] == 0.0
  assert not {"own_tokens", "own_clipped", "graft_tokens", "graft_clipped"} & set(out)


def test_a_micro_batch_adds_by_its_reducer():
  total = kinds.Metric(np.float32(1.0), kinds.FRACTION)
  assert float(kinds.add_micro_batch(total, kinds.Metric(2.0, kinds.FRACTION), 0.25)) == 1.5
  assert float(kinds.add_micro_batch(total, kinds.Metric(2.0, kinds.MEAN), 0.25)) == 3.0
  assert float(kinds.add_micro_batch(total, kinds.Metric(0.5, kinds.MAX), 0.25)) == 1.0
