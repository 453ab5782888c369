"""The toy benchmark's figure: held-out pass@1 over training, every method, mean over seeds.

A column per updated model; the top row holds the methods the paper compares
(GRPO at three group sizes, GRAFT, HACPO, SGT, stored-log replay), the bottom
row GRAFT beside each of its ablations, with GRPO n=8 in both for reference.
Step 0 is the initial pair on the whole held-out set (``INITIAL``'s cell); the
later points are the validations during training (``toy_compare.validator``:
``VALIDATION_PER_FAMILY`` held-out problems per family, one sample at T=1),
so the curves are noisier than the tables. The shaded band is ± one standard
deviation over seeds (ddof=1, as in the tables).
"""

from __future__ import annotations

import pathlib

import numpy as np

from benchmarks.toy import benchmark as tb

METHOD_ROW = ("GRPO n=8", "GRPO n=16", "GRPO n=32", "GRAFT", "HACPO", "SGT", tb.REPLAY)
REFERENCE = ("GRPO n=8", "GRAFT")  # drawn in both rows


def series(res: dict, label: str, name: str):
  """(steps, mean %, std %) of ``label``'s validation curve for model ``name``, from step 0."""
  per_step = res.get("curves", {}).get(label, {}).get(name, {})
  initial = res["cells"].get(tb.INITIAL, {}).get(name)
  pts = ([(0, initial)] if initial else []) + sorted((int(s), v) for s, v in per_step.items())
  if len(pts) < 2:
    return None
  steps = np.array([s for s, _ in pts])
  vals = [100 * np.asarray(v, np.float64) for _, v in pts]
  return (steps, np.array([v.mean() for v in vals]),
          np.array([v.std(ddof=1) if len(v) > 1 else 0.0 for v in vals]))


def line_styles(labels) -> dict:
  """A (colour, line style) per label, the same in every panel; no two alike up to 40.

  Ten colours, then the same ten in the next line style: a legend past ten
  entries would otherwise repeat a colour (GRAFT and one of its ablations drawn
  alike).
  """
  dashes = ("-", "--", ":", "-.")
  return {label: (f"C{i % 10}", dashes[i // 10 % len(dashes)])
          for i, label in enumerate(labels)}


def plot(res: dict, path) -> pathlib.Path | None:
  """Writes the PNG to ``path``; None (nothing written) when no cell has a curve."""
  if not any(res.get("curves", {}).values()):
    return None
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  names = res["names"]
  ablations = [label for label in res["cells"]
               if label not in METHOD_ROW and label != tb.INITIAL]
  rows = (("methods", METHOD_ROW), ("GRAFT's ablations", (*REFERENCE, *ablations)))
  styles = line_styles([*METHOD_ROW, *ablations])
  fig, axes = plt.subplots(len(rows), len(names), figsize=(6.4 * len(names), 9.5),
                           squeeze=False)
  seeds = ("seeds " if len(res["seeds"]) > 1 else "seed ") + ", ".join(map(str, res["seeds"]))
  for r, (title, labels) in enumerate(rows):
    for col, name in enumerate(names):
      ax = axes[r][col]
      for label in labels:
        s = series(res, label, name)
        if s is None:
          continue
        steps, mean, std = s
        bold = label in REFERENCE
        color, dash = styles[label]
        ax.plot(steps, mean, marker="o" if bold else ".", lw=2.2 if bold else 1.2,
                color=color, linestyle=dash, label=label)
        ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.12)
      ax.set_title(f"{name} ({title}): held-out pass@1 at T=1 (%)")
      ax.set_xlabel("training step (0: initial pair, full held-out set)")
      ax.legend(fontsize=7, ncol=2)
  fig.suptitle(f"Toy benchmark, mean ± std over {seeds}", fontsize=11)
  fig.tight_layout()
  path = pathlib.Path(path)
  fig.savefig(path, dpi=90)
  plt.close(fig)
  return path
