"""The benchmark's cost: step 0 apart, replay's two directions summed, the tables' columns."""

from benchmarks.toy import benchmark as tb
from benchmarks.toy import costs as toy_costs


def test_cell_costs_keep_the_first_step_apart():
  records = [{"step": 0, "cost/device_s": 20.0, "cost/update_flops": 3.0, "cost/run_device_s": 20.0},
             {"step": 1, "cost/device_s": 2.0, "cost/update_flops": 3.0, "cost/run_device_s": 22.0},
             {"step": 2, "cost/device_s": 4.0, "cost/update_flops": 5.0, "cost/run_device_s": 26.0}]
  got = toy_costs.cell_costs(records)
  assert got["cost"] == {"device_s": 6.0, "update_flops": 8.0}  # steps 1 and 2
  assert got["cost_first_step"] == {"device_s": 20.0, "update_flops": 3.0}
  assert toy_costs.cell_costs([]) == {"cost": {}, "cost_first_step": {}}


def _results(cells, cost, first=None, pass1=None):
  out = {}
  for c in cells:
    key = (c.label, c.seed, c.swap)
    res = {"pass1": (pass1 or {}).get((c.label, c.seed), {"a": 0.5, "b": 0.5}), "diagnostics": {}}
    if key in cost:
      res["cost"] = {"device_s": cost[key], "update_flops": 1e12 * cost[key]}
    if first and key in first:
      res["cost_first_step"] = {"device_s": first[key], "update_flops": 1e10}
    out[c.slug] = res
  return out


def _rows(text):
  return {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()
          if line.startswith("| ") and " | " in line}


def test_replay_sums_its_directions_and_shows_the_log_writer():
  cells = tb.plan_cells([0, 1], {"GRPO n=8": "grpo8", "GRAFT": "graft"})
  cost = {("GRPO n=8", 0, False): 60.0, ("GRPO n=8", 1, False): 80.0,
          ("GRAFT", 0, False): 100.0, ("GRAFT", 1, False): 120.0,
          ("stored-log replay", 0, False): 30.0, ("stored-log replay", 0, True): 70.0,
          ("stored-log replay", 1, False): 40.0, ("stored-log replay", 1, True): 60.0}
  first = {k: 10.0 + i for i, k in enumerate(cost)}
  agg = tb.aggregate(cells, _results(cells, cost, first), ["a", "b"], steps=5, eval_k=2)
  per = {e["seed"]: e for e in agg["costs"]["stored-log replay"]}
  # Seed 0: 30 + 70 = 100 (both directions), seed 1: 40 + 60 = 100; never halved.
  assert per[0]["cost"]["device_s"] == 100.0 and per[1]["cost"]["device_s"] == 100.0
  assert per[0]["first_step"]["device_s"] == first[("stored-log replay", 0, False)] + first[
      ("stored-log replay", 0, True)]
  rows = _rows(tb.results_markdown(agg, "cmd").split("Sign table")[0])
  # Replay 100 with GRPO n=8's mean (60 + 80) / 2 = 70 beside it; FLOPs likewise.
  assert "| 100 (+ 70 GRPO n=8) |" in rows["stored-log replay"]
  assert rows["stored-log replay"].endswith("| 1.00e+14 (+ 7.00e+13 GRPO n=8) |")
  # GRAFT: (100 + 120) / 2 = 110 from step 1 on; step 0: seeds' firsts 12 and 13 -> 12.5 -> "12".
  assert rows["GRAFT"].endswith("| 110 | 12 | 1.10e+14 |")


def test_a_missing_direction_leaves_replays_cost_unknown():
  cells = tb.plan_cells([0], {"GRPO n=8": "grpo8"})
  cost = {("GRPO n=8", 0, False): 60.0, ("stored-log replay", 0, False): 30.0}
  results = _results(cells, cost, {k: 1.0 for k in cost})
  del results["s0/replay_1"]
  entries = toy_costs.per_seed(cells, results, skip=(tb.INITIAL,))
  assert entries["stored-log replay"] == [
      {"seed": 0, "cost": None, "first_step": None, "with_first_step": False}]
  assert toy_costs.column(entries["stored-log replay"], "device_s", "{:.0f}") == "—"


def test_cells_recorded_before_the_split_are_starred_and_the_grpo32_comparison():
  cells = tb.plan_cells([0, 1], {"GRPO n=32": "grpo32", "GRAFT": "graft", "SGT": "sgt"})
  cost = {("GRPO n=32", 0, False): 400.0, ("GRPO n=32", 1, False): 600.0,
          ("GRAFT", 0, False): 180.0, ("GRAFT", 1, False): 220.0}
  pass1 = {("GRPO n=32", 0): {"a": 0.30, "b": 0.50}, ("GRPO n=32", 1): {"a": 0.40, "b": 0.60},
           ("GRAFT", 0): {"a": 0.35, "b": 0.50}, ("GRAFT", 1): {"a": 0.45, "b": 0.70}}
  agg = tb.aggregate(cells, _results(cells, cost, pass1=pass1), ["a", "b"], steps=5, eval_k=2)
  text = tb.results_markdown(agg, "cmd").split("Sign table")[0]
  rows = _rows(text)
  assert rows["GRPO n=32"].endswith("| 500* | — | 5.00e+14* |")
  assert rows["GRAFT"].endswith("| 200* | — | 2.00e+14* |")
  assert rows["SGT"].endswith("| — | — | — |")  # its cells predate the cost fields
  # GRAFT - GRPO n=32: a 40 - 35 = +5, b 60 - 55 = +5 points; cost 200 / 500 = 0.40.
  assert ("GRAFT against GRPO n=32: pass@1 +5.00 points at 0.40× its cost in device-seconds "
          "(both including step 0's compilation).") in text
  assert "+5.00 points at — (cells without cost)" in toy_costs.comparison(dict(agg, costs={}))
  # One side from step 1 on, the other with step 0: no fraction.
  mixed = _results(cells, cost, first={("GRAFT", 0, False): 5.0, ("GRAFT", 1, False): 5.0},
                   pass1=pass1)
  agg = tb.aggregate(cells, mixed, ["a", "b"], steps=5, eval_k=2)
  assert "at — (one includes step 0, the other not)" in toy_costs.comparison(agg)
  assert toy_costs.comparison(dict(agg, cells={})) == "GRAFT against GRPO n=32: — (no cells of both)."

