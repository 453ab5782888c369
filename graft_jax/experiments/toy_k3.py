"""The K = 3 toy job: GRPO, pairwise GRAFT and GRAFT across three models, at the same budget.

On the toy trio (`graft_jax.toy.spec.trio_config`), from the same initial
checkpoints and the same balanced stream of the three families, it trains
(with ``configs/toy3.py``):

* ``grpo``: each model alone (GRPO n=8; the three train independently);
* ``pair_<x>_<y>``: GRAFT between each pair of models (three runs);
* ``graft_k3``: GRAFT across all three (``graft_jax.core.select_exchange_k``).

and evaluates every trained model on the held-out set (T=1 headline, T=0.6 /
top-p 0.95 beside it) through ``toy_compare.run_comparison``. ``summary`` is
``{model: {"initial", "grpo", "graft_pair", "graft_k3": pass@1 (%) at T=1}}``,
where ``graft_pair`` is the pair run that gives the model its highest held-out
pass@1 and ``best_peer[model]`` names that run's other model.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import time

from graft_jax.experiments import toy_compare, toy_k3_report, toy_report
from graft_jax.experiments.toy_k3_report import pair_label
from graft_jax.toy import pair as toy_pair
from graft_jax.toy import spec as spec_lib

TOY3_CONFIG = toy_compare.TOY_CONFIG.with_name("toy3.py")
RL_FILE = "rl.jsonl"  # in the trio's root; configs/toy3.py trains on it when run alone


def ensure_trio(root, cfg):
  """The trio under ``root`` (built on first use, reused after), with its RL pool as
  ``root/rl.jsonl`` in seed 0's balanced order (what ``configs/toy3.py`` reads)."""
  trio = toy_pair.ensure_toy_pair(root, cfg)
  path = pathlib.Path(root) / RL_FILE
  if not path.is_file():
    rows = [p.to_row() for p in toy_pair.rl_problems(cfg, 0)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  return trio


def members(root, trio_cfg) -> list[tuple[str, str]]:
  """(folder, name) of each model of the group built from ``trio_cfg`` under ``root``."""
  names = toy_pair.folders(len(trio_cfg.models))
  return [(str(pathlib.Path(root) / f), m.name) for f, m in zip(names, trio_cfg.models)]


def run_plan(members) -> tuple[dict, dict]:
  """(``{label: preset}``, ``{label: ((path, name), ...)}``) of the job's five runs."""
  presets = {"grpo": "grpo"}
  models = {"grpo": members, "graft_k3": members}
  for x, y in itertools.combinations(members, 2):
    presets[pair_label(x[1], y[1])] = "graft"
    models[pair_label(x[1], y[1])] = (x, y)
  presets["graft_k3"] = "graft"
  return presets, models


def method_configs(trio_cfg, root, overrides=(), **kw) -> dict:
  """``{label: TrainConfig}`` of `run_plan`'s runs on the trio under ``root``
  (``toy_compare.method_configs``'s keywords)."""
  presets, models = run_plan(members(root, trio_cfg))
  return toy_compare.method_configs(trio_cfg, overrides, methods=presets, models=models,
                                    config_file=TOY3_CONFIG, **kw)


def pair_runs(results: dict, name: str) -> dict:
  """{peer: pair run label} of the pair runs that trained ``name``."""
  out = {}
  for label, run in results["runs"].items():
    if label.startswith("pair_") and name in run["evals"]:
      (peer,) = [n for n in run["evals"] if n != name]
      out[peer] = label
  return out


def k3_summary(results: dict, setting: str = "t1") -> tuple[dict, dict]:
  """(``{model: {"initial", "grpo", "graft_pair", "graft_k3"}}`` in percent at ``setting``,
  ``{model: best peer}``), the best peer's run chosen at ``setting``."""
  full = toy_compare.summary(results, setting)
  summary, best = {}, {}
  for name in results["names"]:
    runs = pair_runs(results, name)
    peer = max(runs, key=lambda p: full[name][runs[p]])
    best[name] = peer
    summary[name] = {"initial": full[name]["initial"], "grpo": full[name]["grpo"],
                     "graft_pair": full[name][runs[peer]], "graft_k3": full[name]["graft_k3"]}
  return summary, best


def run_job(cfgs: dict, trio, trio_cfg, **kw) -> dict:
  """``toy_compare.run_comparison`` of the five runs, with the K = 3 summaries added."""
  results = toy_compare.run_comparison(cfgs, trio, trio_cfg, **kw)
  results["summary_all"] = results["summary"]
  results["summary"], results["best_peer"] = k3_summary(results, "t1")
  results["summary_t06"], results["best_peer_t06"] = k3_summary(results, "t06")
  return results


def default_root(smoke: bool, workdir) -> pathlib.Path:
  return pathlib.Path(workdir) / "toy_trio" if smoke else pathlib.Path(spec_lib.TRIO_ROOT)


def run_from_args(args, overrides) -> None:
  """``launch/toy_job.py --models 3``: checks the configs, builds (or reuses) the trio, runs
  the five runs, prints the K = 3 table and the exchange, writes results.json and a figure."""
  start = time.perf_counter()
  workdir = pathlib.Path(args.workdir)
  trio_cfg = spec_lib.tiny_trio_config() if args.smoke else spec_lib.trio_config()
  root = pathlib.Path(args.pair_root) if args.pair_root else default_root(args.smoke, workdir)
  # Every config is checked before the trio is built or a model loads.
  cfgs = method_configs(trio_cfg, root, overrides, workdir=workdir, seed=args.seed,
                        steps=args.steps, smoke=args.smoke, jobs=args.jobs)
  trio = toy_pair.load_built(root) if args.pair_root else ensure_trio(root, trio_cfg)
  results = run_job(cfgs, trio, trio_cfg, eval_k=2 if args.smoke else args.eval_k,
                    seed=args.seed, jobs=args.jobs,
                    num_train_problems=96 if args.smoke else 3 * trio_cfg.rl_per_family)
  results["exchange"] = toy_k3_report.exchange_summary(results)
  results["wall_seconds"] = time.perf_counter() - start
  print()
  for setting in toy_compare.EVAL_SETTINGS:
    print(toy_k3_report.k3_table(results, setting), end="\n\n")
  print(toy_k3_report.exchange_lines(results), end="\n\n")
  print(toy_report.complementarity_lines(results, method="graft_k3"))
  png = toy_report.plot_curves(results, workdir / "learning_curves.png", method="graft_k3")
  js = toy_report.write_json(results, workdir / "results.json")
  print(f"\nwrote {png} and {js}; wall time {results['wall_seconds']:.0f}s")
