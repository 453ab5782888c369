"""Printing and plotting the toy comparison: the paper-style tables, the exchange, complementarity, learning curves."""

from __future__ import annotations

import json
import math
import pathlib


def _pct(x) -> str:
  return "  n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:5.1f}"


def results_table(results: dict, baseline: str = "grpo", method: str = "graft",
                  setting: str = "t1") -> str:
  """Updated model | peer | initial | GRPO n=8 | GRAFT | delta, then per group
  initial / GRPO / GRAFT, on held-out pass@1 (%) at one of ``EVAL_SETTINGS``."""
  names, groups = results["names"], results["groups"]
  pick = lambda evals, n: evals[n].get(setting, evals[n])
  base, ours = results["runs"][baseline]["evals"], results["runs"][method]["evals"]
  init = results["initial"]
  where = ("T=1.0" if setting == "t1" else "T=0.6, top-p 0.95")
  lines = [f"Held-out pass@1 (%) at {where}, k={results['eval_k']} samples on "
           f"{results.get('eval_problems', '?')} problems",
           f"{'updated model':14s} {'peer':8s} {'initial':>8s} {'GRPO n=8':>9s} {'GRAFT':>7s} "
           f"{'delta':>7s}" + "".join(f"  {g[:8] + ' init/GRPO/GRAFT':>24s}" for g in groups)]
  for recv, peer in zip(names, names[::-1]):
    i, b, o = (pick(e, recv) for e in (init, base, ours))
    row = (f"{recv:14s} {peer:8s} {_pct(i['average']):>8s} {_pct(b['average']):>9s} "
           f"{_pct(o['average']):>7s} {100 * (o['average'] - b['average']):+7.2f}")
    for g in groups:
      row += f"  {_pct(i['pass1'][g]):>8s} /{_pct(b['pass1'][g])} /{_pct(o['pass1'][g])}"
    lines.append(row)
  lines.append("cost from step 1 on, both models (step 0 compiles): " + "; ".join(
      f"{label} {cost_text(results['runs'][label].get('cost'))}" for label in (baseline, method)))
  return "\n".join(lines)


def cost_text(cost) -> str:
  """A run's summed cost (`graft_jax.outputs.cost_totals.summed`); — for a run without."""
  if not cost or cost.get("device_s") is None:
    return "—"
  return f"{cost['device_s']:.0f} device-s, {cost.get('update_flops', 0.0):.2e} update FLOPs"


def exchange_lines(results: dict, method: str = "graft") -> str:
  """Per receiver: grafted groups, offered and admitted peer responses per step, median s."""
  run = results["runs"].get(method)
  if run is None:
    return ""
  lines = [f"Exchange under {method}, mean per step (receiver's view):"]
  for n in results["names"]:
    col = lambda k: [r[f"{n}/{k}"] for r in run["curve"] if r.get(f"{n}/{k}") is not None]
    mean = lambda v: sum(v) / len(v) if v else float("nan")
    share = run["admission"].get(n)
    lines.append(f"  {n:8s} grafted groups {mean(col('grafted')):5.2f}, offered "
                 f"{mean(col('offered')):6.1f}, admitted {mean(col('admitted')):6.1f} "
                 f"({_pct(share)}% of offered), median s {mean(col('s_p50')):.3f}")
  return "\n".join(lines)


def complementarity_lines(results: dict, method: str = "graft") -> str:
  """The share of each model's all-fail held-out problems that the peer solves, start and end."""
  from graft_jax.experiments.toy_compare import complementarity  # pylint: disable=import-outside-toplevel

  lines = ["Complementarity on held-out problems (peer solves / model's all-fail):"]
  for label in results["runs"]:
    end = results["runs"][label]["complementarity_end"]
    members = [n for n in results["names"] if n in end]  # a group's pair runs train two
    start = (results["complementarity_start"] if len(members) == len(results["names"])
             else complementarity(results["initial"], members))  # among the run's models
    for name in members:
      s, e = start[name], end[name]
      lines.append(f"  {name:8s} start {s['peer_solves']:3d}/{s['all_fail']:<3d} ({_pct(s['share'])}%)"
                   f"   end after {label:6s} {e['peer_solves']:3d}/{e['all_fail']:<3d} ({_pct(e['share'])}%)")
  return "\n".join(lines)


def plot_curves(results: dict, path, method: str = "graft") -> pathlib.Path:
  """One PNG, a column per model: held-out pass@1 over training for each method
  (top); under ``method``, grafted groups and the median gate score per step
  (middle), and the peer responses offered and admitted per step (bottom)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  names = results["names"]
  fig, axes = plt.subplots(3, len(names), figsize=(5.4 * len(names), 9.0), squeeze=False)
  run = results["runs"].get(method)
  for col, name in enumerate(names):
    ax = axes[0][col]
    for label, r in results["runs"].items():
      if name not in r["evals"]:  # a pair run of the other two models
        continue
      pts = [(0, results["initial"][name]["average"])]
      pts += [(c["step"] + 1, c[f"{name}/eval"]) for c in r["curve"]
              if c.get(f"{name}/eval") is not None]
      ax.plot([s for s, _ in pts], [100 * v for _, v in pts], marker="o", label=label)
    ax.set_title(f"{name}: held-out pass@1 at T=1 (%)")
    ax.set_xlabel("training step (0: initial pair)")
    ax.legend()
    if run is None:
      for ax in (axes[1][col], axes[2][col]):
        ax.set_visible(False)
      continue
    steps = [c["step"] + 1 for c in run["curve"]]
    get = lambda key: [c.get(f"{name}/{key}") for c in run["curve"]]
    ax = axes[1][col]
    ax.bar(steps, [v or 0 for v in get("grafted")], color="tab:green", alpha=0.6)
    ax.set_ylabel("grafted groups (bars)")
    ax.set_title(f"{name} receiving under {method}")
    twin = ax.twinx()
    twin.plot(steps, [v if v is not None else float("nan") for v in get("s_p50")], "k.-")
    twin.set_ylim(0, 1.2)
    twin.set_ylabel("median gate score s (dots)")
    ax = axes[2][col]
    ax.plot(steps, [v or 0 for v in get("offered")], label="peer responses offered")
    ax.plot(steps, [v or 0 for v in get("admitted")], label="admitted by the gate")
    ax.set_xlabel("training step")
    ax.legend(fontsize=8)
  fig.tight_layout()
  path = pathlib.Path(path)
  fig.savefig(path, dpi=90)
  plt.close(fig)
  return path


def write_json(results: dict, path) -> pathlib.Path:
  path = pathlib.Path(path)
  path.write_text(json.dumps(results, indent=1, default=float))
  return path
