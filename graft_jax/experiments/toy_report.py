"""Printing and plotting the toy comparison: the paper-style table, complementarity, learning curves."""

from __future__ import annotations

import json
import math
import pathlib


def _pct(x) -> str:
  return "  n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:5.1f}"


def results_table(results: dict, baseline: str = "grpo", method: str = "graft") -> str:
  """Updated model | peer | GRPO n=8 | GRAFT | delta, on held-out pass@1 (%), per group and average."""
  names, groups = results["names"], results["groups"]
  base, ours = results["runs"][baseline]["evals"], results["runs"][method]["evals"]
  init = results["initial"]
  lines = [f"Held-out pass@1 (%), k={results['eval_k']} samples at T=0.6, top-p 0.95",
           f"{'updated model':14s} {'peer':8s} {'initial':>8s} {'GRPO n=8':>9s} {'GRAFT':>7s} {'delta':>7s}"
           + "".join(f"  {g[:10]:>10s} GRPO/GRAFT" for g in groups)]
  for recv, peer in zip(names, names[::-1]):
    b, o = base[recv]["average"], ours[recv]["average"]
    row = (f"{recv:14s} {peer:8s} {_pct(init[recv]['average']):>8s} {_pct(b):>9s} {_pct(o):>7s} "
           f"{100 * (o - b):+7.2f}")
    for g in groups:
      row += f"  {_pct(base[recv]['pass1'][g]):>10s} / {_pct(ours[recv]['pass1'][g])}"
    lines.append(row)
  return "\n".join(lines)


def complementarity_lines(results: dict, method: str = "graft") -> str:
  """The share of each model's all-fail held-out problems that the peer solves, start and end."""
  lines = ["Complementarity on held-out problems (peer solves / model's all-fail):"]
  start = results["complementarity_start"]
  for label in results["runs"]:
    end = results["runs"][label]["complementarity_end"]
    for name in results["names"]:
      s, e = start[name], end[name]
      lines.append(f"  {name:8s} start {s['peer_solves']:3d}/{s['all_fail']:<3d} ({_pct(s['share'])}%)"
                   f"   end after {label:6s} {e['peer_solves']:3d}/{e['all_fail']:<3d} ({_pct(e['share'])}%)")
  return "\n".join(lines)


def plot_curves(results: dict, path) -> pathlib.Path:
  """Training reward per step, per model and method (PNG)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  names = results["names"]
  fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.4), squeeze=False)
  for ax, name in zip(axes[0], names):
    for label, run in results["runs"].items():
      steps = [r["step"] for r in run["curve"]]
      ax.plot(steps, [r[name] for r in run["curve"]], label=label)
    ax.set_title(f"{name}: mean training reward")
    ax.set_xlabel("step")
    ax.legend()
  fig.tight_layout()
  path = pathlib.Path(path)
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def write_json(results: dict, path) -> pathlib.Path:
  path = pathlib.Path(path)
  path.write_text(json.dumps(results, indent=1, default=float))
  return path
