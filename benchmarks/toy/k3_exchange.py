"""What each receiver of a K = 3 run was offered and admitted, per family, from its peer logs.

  python -m benchmarks.toy.k3_exchange runs/toy3_main/graft_k3 [--trio runs/toy_trio]

The peer logs (`graft_jax.outputs.peer_log`) keep, for every response, its
reward and advantage and, for every receiver it was offered to, the gate's
score s and whether it was admitted. Joined with the family of each RL prompt,
they say per (receiver, source, family): how many responses were offered, the
share admitted among the correct and among the wrong ones, the median s of
each, and the summed A * w of the admitted correct and wrong rows: the signal
the receiver's update got on that family. With it, each model's own success
rate per family over three step windows shows when (and whether) a family
transferred. The clip fractions and the minibatch order need no join: they are
in metrics.jsonl (``update/clip_frac_graft``) and the config (``graft.order``).
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
import pandas as pd

from graft_jax.toy import pair as toy_pair
from graft_jax.toy import spec as spec_lib

WINDOWS = ((1, 10), (11, 30), (31, 80))


def exchange_rows(run: pathlib.Path, family_of: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
  """(every logged response with its family, one row per (response, receiver) offer)."""
  files = sorted((run / "peer_logs").glob("*/step_*.parquet"))
  if not files:
    raise SystemExit(f"no peer logs under {run / 'peer_logs'} (logging.peer_log off?)")
  df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
  df["family"] = df.prompt_id.map(family_of)
  if df.family.isna().any():
    raise SystemExit(f"{int(df.family.isna().sum())} logged prompts are not the trio's RL prompts")
  offers = [dict(step=r.step, source=r.model, family=r.family, correct=r.reward > 0.5,
                 advantage=r.advantage, receiver=x["receiver"], s=x["s"],
                 admitted=bool(x["admitted"]), weight=x["weight"])
            for r in df.itertuples() for x in (r.receivers if r.receivers is not None else ())]
  return df, pd.DataFrame(offers)


def own_success_lines(df: pd.DataFrame) -> list[str]:
  lines = ["own success rate per model and family, steps " + ", ".join(f"{a}-{b}" for a, b in WINDOWS)]
  for (model, family), g in df.groupby(["model", "family"]):
    rates = [g[(g.step >= a) & (g.step <= b)].reward.mean() for a, b in WINDOWS]
    lines.append(f"  {model:6s} {family:5s} " + "  ".join(f"{x:.3f}" for x in rates))
  return lines


def offer_lines(offers: pd.DataFrame) -> list[str]:
  lines = ["receiver <- source family: offered, correct share, admitted | correct, admitted | "
           "wrong, median s correct / wrong, summed A*w admitted correct / wrong"]
  for (receiver, source, family), g in offers.groupby(["receiver", "source", "family"]):
    c, w = g[g.correct], g[~g.correct]
    aw = lambda x: float((x.advantage * x.weight)[x.admitted].sum())
    med = lambda x: f"{x.s.median():.2f}" if len(x) else "—"
    share = lambda x: f"{x.admitted.mean():.2f}" if len(x) else "—"
    lines.append(f"  {receiver}<-{source} {family:5s} {len(g):5d} {len(c) / len(g):.2f} "
                 f"{share(c):>5s} {share(w):>5s} {med(c):>5s} / {med(w):5s} "
                 f"{aw(c):+8.1f} / {aw(w):+8.1f}")
  return lines


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("run", type=pathlib.Path, help="a K = 3 run's workdir (its peer_logs)")
  args = parser.parse_args(argv)
  family_of = {p.id: p.family for p in toy_pair.rl_problems(spec_lib.trio_config(), 0)}
  df, offers = exchange_rows(args.run, family_of)
  print("\n".join(own_success_lines(df) + [""] + offer_lines(offers)))
  s = offers.s[offers.s.notna()]
  print(f"\n{len(offers)} offers, s p10/p50/p90 {np.quantile(s, [.1, .5, .9]).round(2).tolist()}")


if __name__ == "__main__":
  main()
