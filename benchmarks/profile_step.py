"""Where graft_jax's GRPO step spends its time, on the model of benchmarks/bench_vs_trl.py.

  XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true .venv/bin/python benchmarks/profile_step.py \\
      [--steps 4 --micro_batch_tokens 1024]

Per step: XLA compilations (a jax.monitoring count) and seconds per phase.
Then the update's pieces (host packing, host -> device transfer, the compiled
program, device -> host metrics) and a profiler trace of the program split
by kind of XLA op (`benchmarks.xla_profile`).
"""

import argparse
import collections
import pathlib
import tempfile
import time

import jax
from jax import monitoring

import _path  # noqa: F401  (the repository root on sys.path)
from benchmarks import speed, xla_profile


def timed(fn, *args):
  t = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return out, time.perf_counter() - t


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=4)
  ap.add_argument("--micro_batch_tokens", type=int, default=1024, help="0: whole minibatch")
  args = ap.parse_args()
  compiles = collections.Counter()
  step = [0]
  monitoring.register_event_duration_secs_listener(
      lambda event, s, **kw: compiles.update([step[0]])
      if event == "/jax/core/compile/backend_compile_duration" else None)
  with tempfile.TemporaryDirectory() as tmp:
    folder = speed.write_bench_model(pathlib.Path(tmp, "model"))
    side = speed.JaxSide.load(folder, speed.arithmetic_problems(args.steps * 16, seed=1),
                              micro_batch_tokens=args.micro_batch_tokens)
    print("step | compilations | generate | old log-probs | reward | update | whole step (s)")
    for s in range(args.steps):
      step[0] = s
      t = side.step(s)
      print(f"{s} | {compiles[s]} | {t['generate']:.2f} | {t['old_logp']:.2f} | "
            f"{t['reward']:.3f} | {t['update']:.2f} | {t['step']:.2f}")
    (batch, _), pack_s = timed(side.update_batch)
    _, put_s = timed(jax.device_put, batch)
    for micro in (False, True) if args.micro_batch_tokens else (False,):
      compiled, call = side.update_program(micro)
      timed(compiled, *call)  # warm
      out, run_s = timed(compiled, *call)
      _, get_s = timed(jax.device_get, out[1])
      label = f"micro-batches of {args.micro_batch_tokens} tokens" if micro else "whole minibatch"
      print(f"\nupdate, {label}: pack {pack_s * 1e3:.1f} ms, to device {put_s * 1e3:.1f} ms, "
            f"program {run_s:.2f} s, metrics to host {get_s * 1e3:.2f} ms")
      for kind, share in xla_profile.by_kind(xla_profile.op_seconds(compiled, *call)).items():
        print(f"  {share:6.1%}  {kind}")


if __name__ == "__main__":
  main()
