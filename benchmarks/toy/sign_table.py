"""The paper's comparative claims, read as a sign table over the toy benchmark's seeds.

For each comparison row, per model, the paired difference over the seeds both
cells ran, d_s = pass@1(GRAFT, s) - pass@1(row, s), its mean d, standard error
SE = std(d, ddof=1) / sqrt(n), and the two-sided p-value of a paired t-test
(t = d / SE with n - 1 degrees of freedom). A row is "GRAFT ahead" when p < 0.05
on some model and every model with p < 0.05 has d > 0, "GRAFT behind" the
reverse, and "not separated" otherwise. Every seed trains from the same built
pair, so the test speaks to the training seed's noise, not to the pair's. Two
further claims have their own rule: GRAFT above GRPO n=8 by at least 3 points
on every seed and model, and HACPO below GRPO n=8 on at least one model (its
mean over seeds).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

REFERENCE = "GRAFT"
BASELINE = "GRPO n=8"
# The rows GRAFT should beat (the paper's tables), in the order RESULTS.md shows them.
ROWS = ("GRPO n=8", "no gate", "success-only", "pooled adv.", "peer-first", "uniform order",
        "sequence ratio", "SGT", "HACPO", "SGT on GRAFT's prompts", "HACPO on GRAFT's prompts")
GRPO_MARGIN = 0.03  # GRAFT over GRPO n=8 on every seed, as a fraction
ALPHA = 0.05  # a model separates a row at p < ALPHA


def paired(res: dict, label: str, model: str, ref: str = REFERENCE) -> np.ndarray:
  """pass@1(ref) - pass@1(label) on each seed both cells ran, in seed order."""
  def by_seed(lab):
    values = res["cells"].get(lab, {}).get(model, [])
    return dict(zip(res["cell_seeds"].get(lab, {}).get(model, []), values))
  a, b = by_seed(ref), by_seed(label)
  return np.asarray([a[s] - b[s] for s in sorted(a.keys() & b.keys())], np.float64)


def mean_se(d: np.ndarray) -> tuple[float, float]:
  """The mean and its standard error (nan with fewer than two seeds)."""
  if len(d) == 0:
    return float("nan"), float("nan")
  se = float(np.std(d, ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
  return float(np.mean(d)), se


def p_value(d: np.ndarray) -> float:
  """Two-sided p of the paired t-test that the mean of ``d`` is 0 (nan with fewer than two
  seeds). Equal differences have SE 0: p is 0 unless they are all 0 (then 1)."""
  if len(d) < 2:
    return float("nan")
  m, se = mean_se(d)
  if se == 0.0:
    return 1.0 if m == 0.0 else 0.0
  return float(2.0 * stats.t.sf(abs(m) / se, df=len(d) - 1))


def verdict(diffs: dict[str, np.ndarray]) -> str:
  """'GRAFT ahead', 'GRAFT behind', 'not separated' or 'too few seeds' (see the module)."""
  if not diffs or any(len(d) < 2 for d in diffs.values()):
    return "too few seeds"
  signs = {np.sign(mean_se(d)[0]) for d in diffs.values() if p_value(d) < ALPHA}
  if signs == {1.0}:
    return "GRAFT ahead"
  if signs == {-1.0}:
    return "GRAFT behind"
  return "not separated"


def sign_markdown(res: dict) -> str:
  """The sign table: one row per comparison, Δ = GRAFT − row (points, mean ± SE over seeds)
  and the paired t-test's p per model."""
  names = res["names"]
  lines = [f"Sign table: Δ = {REFERENCE} − row, held-out pass@1 points at T=1, mean ± standard "
           "error over the seeds both ran, paired by seed, and the two-sided p of a paired "
           f"t-test (n − 1 degrees of freedom). A row is {REFERENCE} ahead (behind) when "
           f"p < {ALPHA} on some model and every model with p < {ALPHA} has Δ > 0 (Δ < 0); "
           "otherwise not separated. Every seed trains from the same built pair.", "",
           "| row | " + " | ".join(names) + " | seeds | verdict |",
           "|---" * (len(names) + 3) + "|"]
  for label in ROWS:
    if label not in res["cells"] or REFERENCE not in res["cells"]:
      continue
    diffs = {n: paired(res, label, n) for n in names}
    cols = []
    for n in names:
      m, se = mean_se(diffs[n])
      p = p_value(diffs[n])
      cols.append("n/a" if not np.isfinite(m) else f"{100 * m:+.2f}" if not np.isfinite(se)
                  else f"{100 * m:+.2f} ± {100 * se:.2f} (p {p:.3f})")
    seeds = min(len(d) for d in diffs.values())
    lines.append(f"| {label} | " + " | ".join(cols) + f" | {seeds} | {verdict(diffs)} |")
  lines += ["", *claims(res)]
  return "\n".join(lines)


def claims(res: dict) -> list[str]:
  """The two rules that are not a GRAFT-vs-row sign: GRAFT's margin over GRPO n=8 on every
  seed, and HACPO below GRPO n=8 on some model."""
  out = []
  names = res["names"]
  if REFERENCE in res["cells"] and BASELINE in res["cells"]:
    worst = {n: paired(res, BASELINE, n) for n in names}
    mins = ", ".join(f"{n} {100 * d.min():+.2f}" for n, d in worst.items() if len(d))
    met = all(len(d) and d.min() >= GRPO_MARGIN for d in worst.values())
    out.append(f"- GRAFT above GRPO n=8 by at least {100 * GRPO_MARGIN:.0f} points on every "
               f"seed and model: {'met' if met else 'not met'} (smallest margin: {mins}).")
  if "HACPO" in res["cells"] and BASELINE in res["cells"]:
    gaps = {n: mean_se(paired(res, BASELINE, n, ref="HACPO"))[0] for n in names}
    below = [n for n, g in gaps.items() if np.isfinite(g) and g < 0]
    out.append("- HACPO below GRPO n=8 on at least one model: "
               + ("met" if below else "not met") + " (HACPO − GRPO n=8: "
               + ", ".join(f"{n} {100 * g:+.2f}" for n, g in gaps.items()) + ").")
  return out
