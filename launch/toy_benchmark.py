"""The toy reproduction benchmark: every method, several seeds, both directions -> RESULTS.md.

  python launch/toy_benchmark.py [--seeds 0 1 2] [--steps N] [--jobs 1] [--out runs/toy_benchmark]

Writes the tables between RESULTS.md's generated markers and the figure of
held-out pass@1 over training (``--figure``, linked from the tables).

A script, not a test. Cells (seed x method) are independent: `--jobs N` runs N
at a time as subprocesses, and a rerun skips the cells already finished. Each
finished cell's result is kept in the repository (`--record`,
docs/toy_benchmark/cells/s<seed>/<method>.json), so the tables and figure are
regenerated from it without training, and an interrupted benchmark continues
on another machine; a cell is trained again only when the toy pair or
configs/toy.py's math differs from the one it was recorded with.
"""

import argparse
import json
import logging
import os
import pathlib
import shlex
import sys

from graft_jax import toy
from graft_jax.experiments import toy_benchmark, toy_benchmark_figure, toy_compare
from graft_jax.config import run_config as config_lib


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
  parser.add_argument("--steps", type=int, default=None,
                      help="steps per cell (default: configs/toy.py's total_steps, the main job's)")
  parser.add_argument("--eval-k", type=int, default=2)
  parser.add_argument("--jobs", type=int, default=1, help="cells run at a time (subprocesses)")
  parser.add_argument("--out", default="runs/toy_benchmark")
  parser.add_argument("--results", default="RESULTS.md")
  parser.add_argument("--figure", default="docs/figures/toy_benchmark.png",
                      help="PNG of held-out pass@1 over training (linked from --results)")
  parser.add_argument("--record", default="docs/toy_benchmark/cells",
                      help="folder of finished cells' results, kept in the repository "
                           "(\"\": none; --smoke records nothing)")
  parser.add_argument("--machine", default="", help="a line on where it ran, for RESULTS.md")
  parser.add_argument("--only", nargs="*", help="method labels to run (default: all)")
  parser.add_argument("--smoke", action="store_true", help="tiny pair, tiny steps (tests)")
  parser.add_argument("--cell", help=argparse.SUPPRESS)  # one cell, as JSON (subprocess mode)
  args = parser.parse_args()
  if args.steps is None:
    args.steps = config_lib.load_config("configs/toy.py").total_steps
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  for noisy in ("jax", "absl", "orbax"):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  out = pathlib.Path(args.out)
  pair_cfg = toy.tiny_config() if args.smoke else toy.default_config()
  pair = toy.ensure_toy_pair(out / "toy_pair" if args.smoke else toy.DEFAULT_ROOT, pair_cfg)
  run_here = lambda cell: toy_benchmark.run_cell(
      cell, pair, pair_cfg, out, steps=args.steps, eval_k=args.eval_k,
      overrides=toy_compare.smoke_overrides(pair_cfg) if args.smoke else None,
      num_problems=64 if args.smoke else 2048)
  if args.cell:
    run_here(toy_benchmark.Cell(**json.loads(args.cell)))
    return
  methods = {k: v for k, v in toy_benchmark.METHODS.items() if not args.only or k in args.only}
  cells = toy_benchmark.plan_cells(args.seeds, methods)
  results = toy_benchmark.run_cells(
      cells, args.out, steps=args.steps, eval_k=args.eval_k, jobs=args.jobs, run_here=run_here,
      pair_key=toy_benchmark.run_key(pair),
      record_dir=None if args.smoke else args.record or None,
      cell_argv=toy_benchmark.default_cell_argv(__file__, out, steps=args.steps,
                                                eval_k=args.eval_k,
                                                extra=["--smoke"] if args.smoke else []))
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
      figure=os.path.relpath(figure, doc.parent) if figure else None)
  doc.write_text(toy_benchmark.splice(doc.read_text() if doc.exists() else "", text))
  print(text)


if __name__ == "__main__":
  main()
