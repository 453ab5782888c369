"""The toy benchmark's tables from recorded cells alone (no pair, no training)."""

import json
import pathlib
import subprocess
import sys

import pytest

from benchmarks.toy import benchmark as tb
from benchmarks.toy import record as toy_record

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _write(record, cell, pass1, device_s=None, steps=5):
  res = {"cell": {}, "steps": steps, "eval_k": 2, "pass1": pass1, "diagnostics": {}}
  if device_s is not None:
    res["cost"] = {"device_s": device_s, "update_flops": 1e12}
    res["cost_first_step"] = {"device_s": 1.0, "update_flops": 1e10}
  path = tb.record_path(cell, record)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(res))


def _record(tmp_path, steps_of_replay=5):
  record = tmp_path / "cells"
  methods = {"GRPO n=8": "grpo8", "GRAFT": "graft"}
  for cell in tb.plan_cells([0, 1], methods):
    if cell.label == tb.REPLAY:
      name = "b" if cell.swap else "a"
      _write(record, cell, {name: 0.4 + 0.1 * cell.seed}, 10.0 * (1 + cell.swap),
             steps=steps_of_replay)
    else:
      _write(record, cell, {"a": 0.3 + 0.1 * cell.seed, "b": 0.2}, 50.0)
  return record, methods


def test_aggregates_every_recorded_seed_and_sums_replays_directions(tmp_path):
  record, methods = _record(tmp_path)
  assert toy_record.recorded_seeds(record) == [0, 1]
  res = toy_record.aggregate(record, methods=methods)
  assert res["names"] == ["a", "b"] and res["seeds"] == [0, 1] and res["steps"] == 5
  assert res["cells"][tb.REPLAY] == {"a": [0.4, 0.5], "b": [0.4, 0.5]}
  # Each seed's replay cost is 10 + 20 = 30, both directions.
  assert [e["cost"]["device_s"] for e in res["costs"][tb.REPLAY]] == [30.0, 30.0]
  only = toy_record.aggregate(record, seeds=[1], methods=methods)
  assert only["seeds"] == [1] and only["cells"]["GRAFT"]["a"] == [0.4]


def test_cells_of_different_budgets_are_refused(tmp_path):
  record, methods = _record(tmp_path, steps_of_replay=6)
  with pytest.raises(ValueError, match="different steps"):
    toy_record.aggregate(record, methods=methods)
  with pytest.raises(ValueError, match="no recorded cell"):
    toy_record.aggregate(tmp_path / "empty", seeds=[0])


def test_script_rewrites_only_its_regimes_section(tmp_path):
  record, _ = _record(tmp_path)
  doc = tmp_path / "RESULTS.md"
  doc.write_text("# Results\n\nkept\n")
  proc = subprocess.run(
      [sys.executable, "launch/toy_benchmark_tables.py", "--record", str(record), "--results",
       str(doc), "--command", "python launch/toy_benchmark.py --seeds 0 1"],
      cwd=ROOT, capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr
  text = doc.read_text()
  assert text.startswith("# Results\n\nkept\n") and tb.BEGIN in text
  assert "Command: `python launch/toy_benchmark.py --seeds 0 1`; tables from the record:" in text
  assert "| stored-log replay |" in text and "| 30 (+ 50 GRPO n=8) |" in text
  bad = subprocess.run(
      [sys.executable, "launch/toy_benchmark_tables.py", "--record", str(tmp_path / "none"),
       "--results", str(doc), "--command", "x"], cwd=ROOT, capture_output=True, text=True,
      check=False)
  assert bad.returncode == 1 and bad.stderr.strip().endswith("no recorded cell")
