"""The toy benchmark's RESULTS.md tables, regenerated from its recorded cells without training.

  python launch/toy_benchmark_tables.py [--regime friction] [--seeds 0 1 2]
      --command "python launch/toy_benchmark.py ..." [--machine "..."]

Reads docs/toy_benchmark[/<regime>]/cells (``--record``) and rewrites the
regime's generated section of RESULTS.md; the figure is left as it is (its
curves come from the same cells). ``--command`` and ``--machine`` say how the
cells were run, and are printed above the tables with this script's own line.
"""

import argparse
import os
import pathlib
import shlex
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository root
# pylint: disable=wrong-import-position
from benchmarks.toy import benchmark as toy_benchmark, record as toy_record
from graft_jax import toy


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--regime", choices=sorted(toy.REGIMES), default="default")
  parser.add_argument("--seeds", type=int, nargs="+", default=None,
                      help="default: every seed in the record")
  parser.add_argument("--record", default=None,
                      help="default docs/toy_benchmark[/<regime>]/cells")
  parser.add_argument("--results", default="RESULTS.md")
  parser.add_argument("--figure", default=None,
                      help="the figure to link (default docs/figures/toy_benchmark[_<regime>].png)")
  parser.add_argument("--command", required=True, help="the benchmark command that ran the cells")
  parser.add_argument("--machine", default="", help="where the cells ran, for RESULTS.md")
  args = parser.parse_args()
  suffix = "" if args.regime == "default" else f"_{args.regime}"
  record = args.record or ("docs/toy_benchmark/" + (f"{args.regime}/" if suffix else "") + "cells")
  figure = args.figure or f"docs/figures/toy_benchmark{suffix}.png"
  try:
    res = toy_record.aggregate(record, args.seeds)
  except ValueError as e:
    sys.exit(str(e))
  argv = [a for a in sys.argv if a not in (args.command, args.machine)]
  own = shlex.join(["python", *[a for a in argv if a not in ("--command", "--machine")]])
  doc = pathlib.Path(args.results)
  text = toy_benchmark.results_markdown(
      res, f"{args.command}`; tables from the record: `{own}", args.machine,
      figure=os.path.relpath(figure, doc.parent) if pathlib.Path(figure).exists() else None,
      regime=args.regime)
  doc.write_text(toy_benchmark.splice(doc.read_text() if doc.exists() else "", text,
                                      name=f"toy_benchmark{suffix}"))
  print(text)


if __name__ == "__main__":
  main()
