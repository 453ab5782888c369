"""A run's cost over its steps: running totals in metrics.jsonl, sums for results.json.

Each metrics row carries its step's cost (`graft_jax.outputs.step_cost`, keys
``cost/...``); the writer adds the run's running totals of the step sums
(``cost/run_device_s``, ``cost/run_update_flops``), carried over a resume from
the last row kept, and a run's summary (results.json, a benchmark cell) sums
every per-step cost field over the rows.
"""

from __future__ import annotations

from typing import Any, Mapping

# Step sums -> the row field of their running total.
RUNNING = {"cost/device_s": "cost/run_device_s", "cost/update_flops": "cost/run_update_flops"}


def add_running_totals(record: dict, previous: Mapping[str, Any] | None) -> dict:
  """``record`` (a flattened row) with each running total: the previous row's plus this
  step's (a step without the field keeps the previous total)."""
  for step_key, run_key in RUNNING.items():
    before = (previous or {}).get(run_key) or 0.0
    if record.get(step_key) is not None or before:
      record[run_key] = before + (record.get(step_key) or 0.0)
  return record


def summed(records) -> dict[str, float]:
  """Every per-step cost field summed over ``records`` (flattened rows), keyed without the
  ``cost/`` prefix; device counts and running totals are not sums and are left out.
  Empty when no row carries a cost (a run older than the cost fields)."""
  out: dict[str, float] = {}
  for r in records:
    for key, value in r.items():
      if (key.startswith("cost/") and key not in RUNNING.values()
          and not key.endswith("_devices") and isinstance(value, (int, float))):
        name = key[len("cost/"):]
        out[name] = out.get(name, 0.0) + float(value)
  return out


def split_first_step(records) -> dict:
  """``{"cost": ..., "cost_first_step": ...}``: the summed cost (`summed`) of the steps after
  a run's first, and of its first. The first step compiles the sampler, the scorer and the
  update, so its device-seconds measure the compile cache more than the method."""
  steps = [r["step"] for r in records if "step" in r]
  if not steps:
    return {"cost": {}, "cost_first_step": {}}
  first = min(steps)
  return {"cost": summed([r for r in records if r.get("step") != first]),
          "cost_first_step": summed([r for r in records if r.get("step") == first])}
