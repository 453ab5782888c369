"""The README's main job: GRPO (n=8) vs GRAFT on the toy pair, both directions, held-out pass@1.

  python launch/toy_job.py [--steps 80] [--workdir runs/toy_main] [--seed 0] [--smoke]
      [--config.optimizer.lr=3e-4 ...]
  python launch/toy_job.py --models 3 [--workdir runs/toy3_main] ...   # the K=3 table

`--models 3` runs the toy trio instead (configs/toy3.py; graft_jax.experiments.toy_k3):
GRPO, GRAFT in each pair and GRAFT across all three, built under runs/toy_trio on first use.

The pair is the shipped default (`graft_jax.toy`); `--seed` seeds RL and evaluation.
`--config.<field>=<value>` sets a field of configs/toy.py for both methods, as in
launch/train.py. Writes results.json (summary[model][method] = held-out pass@1 % at
T=1), learning_curves.png, and each method's run (config.json included) in the workdir.
"""

import argparse
import pathlib
import sys
import time

from graft_jax import cli, toy
from graft_jax.toy import pair as toy_pair
from graft_jax.experiments import toy_compare, toy_k3, toy_report

SOURCES = {}  # config field -> the --config flag that set it, for one-line errors


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                   epilog="--config.<field>=<value>: a config field for both "
                                          "methods, e.g. --config.optimizer.lr=3e-4")
  parser.add_argument("--steps", type=int, default=None, help="training steps per method")
  parser.add_argument("--workdir", default="runs/toy_main")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--eval-k", type=int, default=2, help="samples per held-out problem")
  parser.add_argument("--pair-root", help="use the finished pair build in this folder as it is")
  parser.add_argument("--jobs", type=int, default=2, help="runs at a time (processes)")
  parser.add_argument("--smoke", action="store_true", help="tiny pair and 2 steps (CI)")
  parser.add_argument("--models", type=int, default=2, choices=(2, 3),
                      help="3: the toy trio's K=3 table (default workdir runs/toy3_main)")
  overrides, rest = cli.split_config_flags(sys.argv[1:])
  SOURCES.update({item.partition("=")[0]: f"--config.{item}" for item in overrides})
  args = parser.parse_args(rest)
  if args.models == 3:
    if args.workdir == parser.get_default("workdir"):
      args.workdir = "runs/toy3_main"
    return toy_k3.run_from_args(args, overrides)
  start = time.perf_counter()
  workdir = pathlib.Path(args.workdir)
  pair_cfg = toy.tiny_config() if args.smoke else toy.default_config()
  # Every config is checked before the pair is built or a model loads.
  cfgs = toy_compare.method_configs(pair_cfg, overrides, workdir=workdir, seed=args.seed,
                                    steps=args.steps, smoke=args.smoke, jobs=args.jobs)
  if args.pair_root:
    pair = toy_pair.load_built(args.pair_root)
  else:
    pair = toy.ensure_toy_pair(workdir / "toy_pair" if args.smoke else toy.DEFAULT_ROOT, pair_cfg)
  results = toy_compare.run_comparison(cfgs, pair, pair_cfg, eval_k=2 if args.smoke else args.eval_k,
                                       seed=args.seed, jobs=args.jobs,
                                       num_train_problems=64 if args.smoke else 2048)
  results["wall_seconds"] = time.perf_counter() - start
  print()
  for setting in toy_compare.EVAL_SETTINGS:
    print(toy_report.results_table(results, setting=setting), end="\n\n")
  print(toy_report.exchange_lines(results), end="\n\n")
  print(toy_report.complementarity_lines(results))
  png = toy_report.plot_curves(results, workdir / "learning_curves.png")
  js = toy_report.write_json(results, workdir / "results.json")
  print(f"\nwrote {png} and {js}; wall time {results['wall_seconds']:.0f}s")


if __name__ == "__main__":
  cli.guard(main, sources=SOURCES)
