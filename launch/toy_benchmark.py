"""The toy reproduction benchmark: every method, several seeds, both directions -> RESULTS.md.

  python launch/toy_benchmark.py [--seeds 0 1 2] [--steps N] [--jobs 1] [--out runs/toy_benchmark]
  python launch/toy_benchmark.py --regime friction   # the second regime (graft_jax.toy.friction)

Writes the tables between RESULTS.md's generated markers and the figure of
held-out pass@1 over training (``--figure``, linked from the tables).

A script, not a test. Cells (seed x method) are independent: `--jobs N` runs N
at a time as subprocesses, and a rerun skips the cells already finished. Each
finished cell's result is kept in the repository (`--record`,
docs/toy_benchmark/cells/s<seed>/<method>.json), so the tables and figure are
regenerated from it without training, and an interrupted benchmark continues
on another machine; a cell is trained again only when the toy pair or
configs/toy.py's math differs from the one it was recorded with.

SIGTERM, SIGINT or SIGUSR1 stops it as it stops a training run: the cells running
save their step and stop, none starts, nothing is written as final, and it exits
75 with one line; the same command resumes them and skips the finished ones.
"""

import argparse
import json
import logging
import os
import pathlib
import shlex
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository root
# pylint: disable=wrong-import-position
from benchmarks.toy import benchmark as toy_benchmark, figure as toy_benchmark_figure
from graft_jax import cli, toy
from graft_jax.experiments import job_signals, toy_compare
from graft_jax.config import run_config as config_lib


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
  parser.add_argument("--steps", type=int, default=None,
                      help="steps per cell (default: the regime's config file's total_steps, "
                           "the main job's)")
  parser.add_argument("--eval-k", type=int, default=2)
  parser.add_argument("--jobs", type=int, default=1, help="cells run at a time (subprocesses)")
  parser.add_argument("--regime", choices=sorted(toy.REGIMES), default="default",
                      help="the toy setting: the shipped pair, or 'friction' (memorized "
                           "shortcuts); each has its own out, record, figure and RESULTS.md section")
  parser.add_argument("--out", default=None, help="default runs/toy_benchmark[_<regime>]")
  parser.add_argument("--results", default="RESULTS.md")
  parser.add_argument("--figure", default=None,
                      help="PNG of held-out pass@1 over training (linked from --results; "
                           "default docs/figures/toy_benchmark[_<regime>].png)")
  parser.add_argument("--record", default=None,
                      help="folder of finished cells' results, kept in the repository "
                           "(default docs/toy_benchmark[/<regime>]/cells; \"\": none; --smoke "
                           "records nothing)")
  parser.add_argument("--machine", default="", help="a line on where it ran, for RESULTS.md")
  parser.add_argument("--only", nargs="*", help="method labels to run (default: all)")
  parser.add_argument("--smoke", action="store_true", help="tiny pair, tiny steps (tests)")
  parser.add_argument("--cell", help=argparse.SUPPRESS)  # one cell, as JSON (subprocess mode)
  args = parser.parse_args()
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  for noisy in ("jax", "absl", "orbax"):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  unknown = [k for k in args.only or () if k not in toy_benchmark.METHODS]
  if unknown:  # before anything is built: a typo would otherwise run the initial cell alone
    raise cli.UsageError(f"--only: no method {', '.join(map(repr, unknown))}; the methods: "
                         f"{', '.join(map(repr, toy_benchmark.METHODS))}")
  regime = toy.REGIMES[args.regime]
  suffix = "" if args.regime == "default" else f"_{args.regime}"
  args.out = args.out or f"runs/toy_benchmark{suffix}"
  args.figure = args.figure or f"docs/figures/toy_benchmark{suffix}.png"
  if args.record is None:
    args.record = "docs/toy_benchmark/" + ("" if not suffix else f"{args.regime}/") + "cells"
  if args.steps is None:
    args.steps = config_lib.load_config(regime.config_file).total_steps
  out = pathlib.Path(args.out)
  pair_cfg = regime.tiny() if args.smoke else regime.config()
  pair = toy.ensure_toy_pair(out / "toy_pair" if args.smoke else regime.root, pair_cfg)
  run_here = lambda cell: toy_benchmark.run_cell(
      cell, pair, pair_cfg, out, steps=args.steps, eval_k=args.eval_k,
      overrides=toy_compare.smoke_overrides(pair_cfg) if args.smoke else None,
      num_problems=64 if args.smoke else 2048, config_file=regime.config_file)
  if args.cell:
    with job_signals.job_stop():
      job_signals.follow_driver_env()  # a cell ends with the benchmark that started it
      run_here(toy_benchmark.Cell(**json.loads(args.cell)))
    return
  methods = {k: v for k, v in toy_benchmark.METHODS.items() if not args.only or k in args.only}
  cells = toy_benchmark.plan_cells(args.seeds, methods)
  results = toy_benchmark.run_cells(
      cells, args.out, steps=args.steps, eval_k=args.eval_k, jobs=args.jobs, run_here=run_here,
      pair_key=toy_benchmark.run_key(pair, regime.config_file),
      record_dir=None if args.smoke else args.record or None,
      cell_argv=toy_benchmark.default_cell_argv(__file__, out, steps=args.steps,
                                                eval_k=args.eval_k,
                                                extra=["--regime", args.regime,
                                                       *(["--smoke"] if args.smoke else [])]))
  names = [m["name"] for m in pair.record["models"]]
  res = toy_benchmark.aggregate(cells, results, names, steps=args.steps, eval_k=args.eval_k)
  out.mkdir(parents=True, exist_ok=True)  # every cell may have come from the record
  (out / "benchmark.json").write_text(json.dumps(res, indent=1))
  argv = list(sys.argv)
  if "--machine" in argv:  # printed on a line of its own
    del argv[argv.index("--machine"):argv.index("--machine") + 2]
  doc = pathlib.Path(args.results)
  figure = pathlib.Path(args.figure)
  figure.parent.mkdir(parents=True, exist_ok=True)
  figure = toy_benchmark_figure.plot(res, figure)
  text = toy_benchmark.results_markdown(
      res, shlex.join(["python", *argv]), args.machine,
      figure=os.path.relpath(figure, doc.parent) if figure else None, regime=args.regime)
  doc.write_text(toy_benchmark.splice(doc.read_text() if doc.exists() else "", text,
                                      name=f"toy_benchmark{suffix}"))
  print(text)


if __name__ == "__main__":
  cli.guard(main)
