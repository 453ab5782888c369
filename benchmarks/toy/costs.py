"""The toy benchmark's cost per method and seed: device-seconds and update FLOPs, compilation apart.

A cell keeps its training steps' summed cost from step 1 on (``cost``) and step
0's apart (``cost_first_step``). Step 0 compiles the sampler, the scorer and the
update, so its device-seconds measure the compile cache and the order the cells
ran in more than the method, and weigh most on the cheap methods. Cells recorded
before the split carry one ``cost`` over every step; the tables mark them.

Stored-log replay trains one model per cell, one cell per direction: its cost on
a seed is the sum of its two cells, and the GRPO n=8 run that wrote the peer
logs it replays is shown beside it (replay does not pay for it, but needs it).
"""

from __future__ import annotations

import numpy as np

from graft_jax.outputs import cost_totals

# The method whose stored peer logs replay trains from (`toy_benchmark.plan_cells`).
LOG_WRITER = "GRPO n=8"
STAR = "*"  # a cost that includes step 0 (a cell recorded before the split)


def cell_costs(records) -> dict:
  """A cell's metrics rows' cost, its first step apart (`cost_totals.split_first_step`)."""
  return cost_totals.split_first_step(records)


def _add(dicts) -> dict | None:
  """Key-wise sum; None when one is missing or empty (a cell without the field)."""
  if not dicts or any(not d for d in dicts):
    return None
  return {k: float(sum(d[k] for d in dicts)) for k in dicts[0] if all(k in d for d in dicts)}


def per_seed(cells, results: dict, skip=()) -> dict:
  """``{label: [{"seed", "cost", "first_step", "with_first_step"}, ...]}`` in plan order: the
  summed cost of the label's cells on each seed (replay: both directions), ``None`` where a
  planned cell of that seed is missing or carries no cost; ``with_first_step`` where a cell
  was recorded before step 0 was kept apart, so its ``cost`` includes step 0."""
  planned: dict = {}
  for cell in cells:
    if cell.label not in skip:
      planned.setdefault(cell.label, {}).setdefault(cell.seed, []).append(cell)
  out: dict = {}
  for label, by_seed in planned.items():
    for seed, group in by_seed.items():
      got = [results[c.slug] for c in group if c.slug in results]
      if not got:
        continue
      complete = len(got) == len(group)
      old = any(r.get("cost") and "cost_first_step" not in r for r in got)
      out.setdefault(label, []).append({
          "seed": seed, "cost": _add([r.get("cost") for r in got]) if complete else None,
          "first_step": (_add([r.get("cost_first_step") for r in got])
                         if complete and not old else None),
          "with_first_step": old})
  return out


def mean(entries: list, key: str, part: str = "cost") -> float | None:
  """The mean over seeds of ``entries[part][key]``; None unless every seed carries it."""
  values = [(e.get(part) or {}).get(key) for e in entries]
  return float(np.mean(values)) if values and None not in values else None


def column(entries: list, key: str, fmt: str, part: str = "cost") -> str:
  """A table cell: the mean over seeds, starred where it includes step 0; — without one."""
  value = mean(entries, key, part)
  if value is None:
    return "—"
  star = STAR if part == "cost" and any(e["with_first_step"] for e in entries) else ""
  return fmt.format(value) + star


def beside_replay(costs: dict, label: str, text: str, key: str, fmt: str) -> str:
  """``text`` with, for replay's row, the log-writing run's figure beside it."""
  writer = column(costs.get(LOG_WRITER, []), key, fmt)
  return f"{text} (+ {writer} {LOG_WRITER})" if label == "stored-log replay" else text


def comparison(res: dict, method: str = "GRAFT", baseline: str = "GRPO n=32") -> str:
  """The paper's cost comparison: ``method`` against ``baseline``, the pass@1 difference
  (mean over models of the mean over seeds) at what fraction of the device-seconds."""
  ours, base = res["cells"].get(method, {}), res["cells"].get(baseline, {})
  common = [n for n in res["names"] if ours.get(n) and base.get(n)]
  if not common:
    return f"{method} against {baseline}: — (no cells of both)."
  diff = np.mean([100 * (np.mean(ours[n]) - np.mean(base[n])) for n in common])
  costs = res.get("costs", {})
  a_entries, b_entries = costs.get(method, []), costs.get(baseline, [])
  a, b = mean(a_entries, "device_s"), mean(b_entries, "device_s")
  old = {any(e["with_first_step"] for e in x) for x in (a_entries, b_entries)}
  if a is None or not b:
    fraction = "— (cells without cost)"
  elif len(old) > 1:
    fraction = "— (one includes step 0, the other not)"
  else:
    fraction = f"{a / b:.2f}×"
  where = " (both including step 0's compilation)" if old == {True} else ""
  return (f"{method} against {baseline}: pass@1 {diff:+.2f} points at {fraction} its "
          f"cost in device-seconds{where}.")


COLUMNS = ("cost (device-s)", "step 0 (device-s)", "update FLOPs")
NOTE = ("Cost: the run's device-seconds (sampling, scoring, update, exchange) and the update's "
        "FLOPs from step 1 on, both models together, mean over seeds; step 0 (compilation "
        "and the first step) apart. Stored-log replay: its two cells (one per direction) "
        f"summed, with the {LOG_WRITER} run whose peer logs it replays beside it. "
        f"{STAR}: cells recorded before step 0 was kept apart, whose cost includes it; — "
        "where the cells predate the cost fields.")


def row_cells(costs: dict, label: str) -> list[str]:
  """The cost columns (`COLUMNS`) of ``label``'s row."""
  entries = costs.get(label, [])
  return [beside_replay(costs, label, column(entries, "device_s", "{:.0f}"), "device_s", "{:.0f}"),
          column(entries, "device_s", "{:.0f}", part="first_step"),
          beside_replay(costs, label, column(entries, "update_flops", "{:.2e}"), "update_flops",
                        "{:.2e}")]
