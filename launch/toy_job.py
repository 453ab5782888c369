"""The README's main job: GRPO (n=8) vs GRAFT on the toy pair, both directions, held-out pass@1.

  python launch/toy_job.py [--steps 80] [--workdir runs/toy_main] [--seed 0] [--smoke]
      [--config.optimizer.lr=3e-4 ...]
  python launch/toy_job.py --models 3 [--workdir runs/toy3_main] ...   # the K=3 table
  python launch/toy_job.py --regime friction   # the second regime (memorized shortcuts)

`--models 3` runs the toy trio instead (configs/toy3.py; graft_jax.experiments.toy_k3):
GRPO, GRAFT in each pair and GRAFT across all three, built under runs/toy_trio on first use.

The pair is the shipped default (`graft_jax.toy`), or with `--regime friction` the
second regime's (`graft_jax.toy.friction`); `--seed` seeds RL and evaluation.
`--config.<field>=<value>` sets a field of configs/toy.py for every method, as in
launch/train.py (ml_collections' config_flags reads it; docs/configs.md). Writes
results.json (summary[model][method] = held-out pass@1 % at T=1),
learning_curves.png, and each method's run (config.json included) in the workdir.

SIGTERM, SIGINT or SIGUSR1 stops the job as it stops a training run: every run
saves its step in flight, nothing is written as final, and it exits 75 with one
line (docs/outputs.md); the same command resumes each run from its saved step.
"""

import pathlib
import time
import types

from absl import flags

from graft_jax import cli, toy
from graft_jax.toy import pair as toy_pair
from graft_jax.experiments import toy_compare, toy_k3, toy_report

_STEPS = flags.DEFINE_integer("steps", None, "training steps per method")
_WORKDIR = flags.DEFINE_string("workdir", None, "default runs/toy_main (runs/toy3_main with "
                               "--models 3, runs/toy_main_friction with --regime friction)")
_SEED = flags.DEFINE_integer("seed", 0, "seeds RL and evaluation")
_EVAL_K = flags.DEFINE_integer("eval-k", 2, "samples per held-out problem")
_PAIR_ROOT = flags.DEFINE_string("pair-root", None,
                                 "use the finished pair build in this folder as it is")
_JOBS = flags.DEFINE_integer("jobs", 2, "runs at a time (processes)")
_SMOKE = flags.DEFINE_bool("smoke", False, "tiny pair and 2 steps (CI)")
_REGIME = flags.DEFINE_enum("regime", "default", sorted(toy.REGIMES),
                            "the toy pair: the shipped default, or 'friction'")
_MODELS = flags.DEFINE_integer("models", 2, "3: the toy trio's K=3 table", lower_bound=2,
                               upper_bound=3)


def main(config_dict):
  """``config_dict`` is configs/toy.py with the ``--config.<field>`` flags, read and checked
  by config_flags; the same fields are set on each method's preset."""
  del config_dict
  if flags.FLAGS["config"].present:
    raise cli.UsageError("--config: the job picks its config files (configs/toy.py, "
                         "configs/toy3.py); set fields with --config.<field>=<value>")
  overrides = cli.overrides()
  if _MODELS.value == 3 and _REGIME.value != "default":
    raise cli.UsageError("--regime: the toy trio (--models 3) has the default regime only")
  if _MODELS.value == 3:
    return toy_k3.run_from_args(_args(default_workdir="runs/toy3_main"), overrides)
  regime = toy.REGIMES[_REGIME.value]
  args = _args(default_workdir="runs/toy_main" + ("" if regime.name == "default"
                                                  else f"_{regime.name}"))
  start = time.perf_counter()
  workdir = pathlib.Path(args.workdir)
  pair_cfg = regime.tiny() if args.smoke else regime.config()
  # Every config is checked before the pair is built or a model loads.
  cfgs = toy_compare.method_configs(pair_cfg, overrides, workdir=workdir, seed=args.seed,
                                    steps=args.steps, smoke=args.smoke, jobs=args.jobs,
                                    config_file=toy_compare.TOY_CONFIG.parents[1]
                                    / regime.config_file)
  if args.pair_root:
    pair = toy_pair.load_built(args.pair_root)
  else:
    pair = toy.ensure_toy_pair(workdir / "toy_pair" if args.smoke else regime.root, pair_cfg)
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


def _args(default_workdir: str) -> types.SimpleNamespace:
  """The job's flags by name, as ``toy_k3.run_from_args`` reads them."""
  return types.SimpleNamespace(steps=_STEPS.value, workdir=_WORKDIR.value or default_workdir,
                               seed=_SEED.value, eval_k=_EVAL_K.value, pair_root=_PAIR_ROOT.value,
                               jobs=_JOBS.value, smoke=_SMOKE.value)


if __name__ == "__main__":
  cli.run(main, default_config="configs/toy.py",
          config_help="read only for its fields: each method's own preset gets them")
