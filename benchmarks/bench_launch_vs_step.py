"""A training run through `launch/train.py` against `bench_vs_trl.py`'s graft_jax step.

  .venv/bin/python benchmarks/bench_launch_vs_step.py [--steps 6]

`bench_vs_trl.py` times `train_step` on one policy in-process. A user runs
`launch/train.py` instead: config loading, the trainer, the reward pool,
metrics and checkpoints around the same step. This script runs both on the same
random model folder and the same 16 prompts x n = 8 per step (`benchmarks.speed`),
and prints the per-model phase medians (steps 2..N) side by side, their ratio,
and the run's second step against its median step (a new shape compiling in
step 2 shows here).

The order is benchmark, run, benchmark: the two benchmark medians bracket the
run, so the machine's drift shows. `launch/train.py` trains a pair; both models
are this folder, and each model's phases are compared with the benchmark's one
policy. The run uses a fresh compile cache (what a first run gets) and every
row runs (`skip_silent_rows=False`, as in the benchmark: the random model earns
no reward). Compare on an idle machine only.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import _path  # noqa: F401  (the repository root on sys.path)
from benchmarks import speed
from graft_jax.train.update import micro_batch_budget

med = statistics.median
ROOT = pathlib.Path(__file__).resolve().parents[1]
PHASES = ("sample_s", "old_logp_s", "update_s")


def bench_steps(folder, problems, steps):
  side = speed.JaxSide.load(folder, problems)
  rows = [side.step(k) for k in range(steps)]
  return [{"sample_s": r["generate"], "old_logp_s": r["old_logp"], "update_s": r["update"],
           "step_s": r["step"]} for r in rows], side.cfg


def write_problems(problems, path):
  with open(path, "w") as f:
    for p in problems:
      f.write(json.dumps({"problem": p.problem, "answer": p.answer}) + "\n")


def launch_run(folder, data, cfg, steps, workdir):
  """`launch/train.py` on the benchmark's work; per-step rows of its metrics.jsonl."""
  models = f"[{{'path': '{folder}', 'name': 'a'}}, {{'path': '{folder}', 'name': 'b'}}]"
  flags = {
      "models": models, "data.train_path": data, "data.shuffle": False,
      "data.prompt_suffix": speed.SUFFIX, "prompts_per_step": cfg.prompts_per_step,
      "n": cfg.n, "num_minibatches": 1, "ppo_epochs": 1, "total_steps": steps,
      "max_prompt_len": cfg.max_prompt_len, "max_response_len": cfg.max_response_len,
      "dtype": "float32", "optimizer.lr": cfg.optimizer.lr, "skip_silent_rows": False,
      "eval.every_steps": 0, "checkpoint.every_steps": 0, "reward.kind": "math_verify",
      "perf.compile_cache_dir": str(pathlib.Path(workdir, "xla_cache")),
      "workdir": workdir}
  cmd = [sys.executable, str(ROOT / "launch/train.py"), "--config=configs/base.py:grpo"]
  cmd += [f"--config.{k}={v}" for k, v in flags.items()]
  t0 = time.perf_counter()
  subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
  wall = time.perf_counter() - t0
  rows = [json.loads(line) for line in open(pathlib.Path(workdir, "metrics.jsonl"))]
  return rows, wall


def per_model(rows, name):
  return [{k: r[f"time/{name}/{k}"] for k in PHASES} for r in rows]


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=6)
  args = ap.parse_args()
  print("command:", " ".join([".venv/bin/python"] + sys.argv))
  print(f"load average {os.getloadavg()[0]:.2f} (compare on an idle machine only); "
        f"update micro-batches of {micro_batch_budget(0) or 'all'} tokens (the backend's choice)")
  with tempfile.TemporaryDirectory() as tmp:
    folder = speed.write_bench_model(pathlib.Path(tmp, "model"))
    problems = speed.arithmetic_problems(args.steps * 16, seed=1)
    data = pathlib.Path(tmp, "problems.jsonl")
    write_problems(problems, data)
    before, cfg = bench_steps(folder, problems, args.steps)
    rows, wall = launch_run(folder, data, cfg, args.steps, str(pathlib.Path(tmp, "run")))
    after, _ = bench_steps(folder, problems, args.steps)
  assert len(rows) == args.steps, f"the run wrote {len(rows)} metrics rows for {args.steps} steps"
  bench = [{k: med([before[i][k], after[i][k]]) for k in before[i]} for i in range(args.steps)]
  col = lambda rs, k: med(r[k] for r in rs[1:])
  print(f"\nmedians of steps 2..{args.steps}, seconds (benchmark: median of the runs before and "
        f"after; before / after in brackets)")
  print("| | " + " | ".join(PHASES) + " |\n|---|" + "---|" * len(PHASES))
  print("| bench_vs_trl step (one policy) | " + " | ".join(
      f"{col(bench, k):.2f} ({col(before, k):.2f} / {col(after, k):.2f})" for k in PHASES) + " |")
  for name in ("a", "b"):
    m = per_model(rows, name)
    print(f"| launch/train.py, model {name} | " + " | ".join(f"{col(m, k):.2f}" for k in PHASES)
          + " |")
    print(f"| ratio, model {name} | " + " | ".join(
        f"{col(m, k) / col(bench, k):.2f}x" for k in PHASES) + " |")
  steps = [r["time/step_s"] for r in rows]
  pair = [sum(b[k] for k in PHASES) * 2 for b in bench]
  print(f"\nlaunch/train.py pair step: median {med(steps[1:]):.2f} s against twice the "
        f"benchmark's phases {med(pair[1:]):.2f} s = {med(steps[1:]) / med(pair[1:]):.2f}x; "
        f"steps: {', '.join(f'{s:.2f}' for s in steps)}")
  print(f"second step / median step: {steps[1] / med(steps[1:]):.2f}x; the run's wall time "
        f"{wall:.0f} s (start-up and the first step's compiles included)")
  print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
