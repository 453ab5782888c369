"""Printing the K = 3 toy job (`graft_jax.experiments.toy_k3`): its table and the exchange
per directed pair of models."""

from __future__ import annotations

from graft_jax.experiments.toy_report import _pct


def pair_label(a: str, b: str) -> str:
  """The run label of the GRAFT run of models ``a`` and ``b`` in the K = 3 job."""
  return f"pair_{a}_{b}"


COLUMNS = (("initial", "initial"), ("grpo", "GRPO n=8"), ("graft_pair", "GRAFT pair"),
           ("graft_k3", "GRAFT K=3"))


def k3_table(results: dict, setting: str = "t1") -> str:
  """Per model: initial | GRPO n=8 | GRAFT with its best single peer (named) | GRAFT K=3,
  then each family group's pass@1 under the four, on held-out pass@1 (%)."""
  summary = results["summary"] if setting == "t1" else results["summary_t06"]
  best = results["best_peer"] if setting == "t1" else results["best_peer_t06"]
  where = "T=1.0" if setting == "t1" else "T=0.6, top-p 0.95"
  groups = results["groups"]
  lines = [f"K=3: held-out pass@1 (%) at {where}, k={results['eval_k']} samples on "
           f"{results['eval_problems']} problems; GRAFT pair = the pair run that gives the "
           f"model its highest pass@1 (peer named)",
           f"{'model':8s}" + "".join(f" {title:>10s}" for _, title in COLUMNS)
           + f" {'best peer':>9s} {'K3-pair':>8s} {'K3-GRPO':>8s}"
           + "".join(f"  {g[:5] + ' init/GRPO/pair/K3':>24s}" for g in groups)]
  for name in results["names"]:
    row = summary[name]
    line = (f"{name:8s}" + "".join(f" {row[k]:10.1f}" for k, _ in COLUMNS)
            + f" {best[name]:>9s} {row['graft_k3'] - row['graft_pair']:+8.1f}"
            + f" {row['graft_k3'] - row['grpo']:+8.1f}")
    runs = {"initial": results["initial"], "grpo": results["runs"]["grpo"]["evals"],
            "graft_pair": results["runs"][pair_label(*sorted_pair(results, name, best[name]))]["evals"],
            "graft_k3": results["runs"]["graft_k3"]["evals"]}
    for g in groups:
      line += "  " + "/".join(_pct(runs[k][name][setting]["pass1"][g]).strip()
                              for k, _ in COLUMNS).rjust(24)
    lines.append(line)
  return "\n".join(lines)


def sorted_pair(results: dict, a: str, b: str) -> tuple[str, str]:
  """The two names in the group's order (how pair run labels spell them)."""
  return tuple(n for n in results["names"] if n in (a, b))


def directed_exchange(run: dict, recv: str, src: str, *, direct: bool) -> dict:
  """Mean per step of grafted groups, offered and admitted peer responses and the median s
  for ``recv`` taking from ``src``; the admitted share over the run."""
  prefix = f"{recv}/" if direct else f"{recv}/from/{src}/"
  col = lambda k: [r[prefix + k] for r in run["curve"] if r.get(prefix + k) is not None]
  mean = lambda v: sum(v) / len(v) if v else float("nan")
  offered, admitted = sum(col("offered")), sum(col("admitted"))
  return {"grafted": mean(col("grafted")), "offered": mean(col("offered")),
          "admitted": mean(col("admitted")), "s_p50": mean(col("s_p50")),
          "share": admitted / offered if offered else None}


def exchange_lines(results: dict) -> str:
  """The exchange per directed pair, under GRAFT K=3 and under the pair runs."""
  names = results["names"]
  lines = ["Exchange per directed pair, mean per step (receiver <- source):"]
  for label, run in results["runs"].items():
    members = [n for n in names if n in run["evals"]]
    if label == "grpo":
      continue
    for recv in members:
      for src in members:
        if src == recv:
          continue
        e = directed_exchange(run, recv, src, direct=len(members) == 2)
        lines.append(f"  {label:20s} {recv:6s} <- {src:6s} grafted groups {e['grafted']:5.2f}, "
                     f"offered {e['offered']:6.1f}, admitted {_pct(e['share'])}% of offered, "
                     f"median s {e['s_p50']:.3f}")
  return "\n".join(lines)


def exchange_summary(results: dict) -> dict:
  """{run label: {"<recv><-<src>": directed_exchange}} for results.json."""
  out = {}
  for label, run in results["runs"].items():
    members = [n for n in results["names"] if n in run["evals"]]
    if label != "grpo":
      out[label] = {f"{r}<-{s}": directed_exchange(run, r, s, direct=len(members) == 2)
                    for r in members for s in members if r != s}
  return out
