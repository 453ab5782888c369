"""The run's running cost totals in metrics.jsonl, carried over a resume, and their sums."""

import pytest

from graft_jax.outputs import cost_totals
from graft_jax.outputs import metrics_writer as metrics_lib


def step(device_s, flops):
  return {"cost": {"device_s": device_s, "update_flops": flops, "trainer_devices": 2,
                   "a": {"sample_device_s": device_s / 4}}}


def test_running_totals_go_on_after_a_resume(tmp_path):
  kw = dict(tensorboard=False, progress_bar=False)
  with metrics_lib.MetricsWriter(tmp_path, **kw) as w:
    for s, (d, f) in enumerate([(1.5, 10.0), (2.0, 20.0), (4.0, 40.0)]):
      w.write(s, step(d, f))
  # Resumed from the checkpoint of step 1: the row of step 2 is dropped and rewritten.
  with metrics_lib.MetricsWriter(tmp_path, initial_step=2, **kw) as w:
    row = w.write(2, step(8.0, 80.0))
  assert row["cost/run_device_s"] == 1.5 + 2.0 + 8.0
  assert row["cost/run_update_flops"] == 10.0 + 20.0 + 80.0
  rows = metrics_lib.read_jsonl(tmp_path / "metrics.jsonl")
  assert [r["cost/run_device_s"] for r in rows] == [1.5, 3.5, 11.5]
  assert cost_totals.summed(rows) == {"device_s": 11.5, "update_flops": 110.0,
                                      "a/sample_device_s": pytest.approx(11.5 / 4)}


def test_rows_without_cost():
  assert cost_totals.summed([{"step": 0, "a/reward_mean": 0.5}]) == {}
  assert "cost/run_device_s" not in cost_totals.add_running_totals({"step": 0}, None)
