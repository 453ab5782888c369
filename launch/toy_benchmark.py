"""The toy reproduction benchmark: every method, several seeds, both directions -> RESULTS.md.

  python launch/toy_benchmark.py [--seeds 0 1 2] [--steps 24] [--out runs/toy_benchmark]

A script, not a test: it takes about an hour on 2 CPU cores.
"""

import argparse
import logging
import pathlib
import sys

from graft_jax import toy
from graft_jax.experiments import toy_benchmark


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
  parser.add_argument("--steps", type=int, default=24)
  parser.add_argument("--eval-k", type=int, default=4)
  parser.add_argument("--out", default="runs/toy_benchmark")
  parser.add_argument("--results", default="RESULTS.md")
  parser.add_argument("--only", nargs="*", help="method labels to run (default: all)")
  args = parser.parse_args()
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  for noisy in ("jax", "absl", "orbax"):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  pair_cfg = toy.default_config(0)
  pair = toy.ensure_toy_pair(toy.DEFAULT_ROOT, pair_cfg)
  methods = {k: v for k, v in toy_benchmark.METHODS.items() if not args.only or k in args.only}
  res = toy_benchmark.run_benchmark(pair, pair_cfg, args.out, seeds=args.seeds, steps=args.steps,
                                    eval_k=args.eval_k, methods=methods)
  text = toy_benchmark.results_markdown(res, "python " + " ".join(sys.argv))
  pathlib.Path(args.results).write_text(text)
  print(text)


if __name__ == "__main__":
  main()
