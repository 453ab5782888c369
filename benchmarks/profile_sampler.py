"""Where a JAX sampler call spends its time, on the model and work of benchmarks/bench_vs_trl.py.

  XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true .venv/bin/python benchmarks/profile_sampler.py \\
      [--prompts 64 --n 8 --new_tokens 128 --streams 1 --top 15]

One call of ``--prompts`` x ``--n`` rows, ``--new_tokens`` each, EOS off, T = 1:
its wall seconds and the process's CPU seconds (one more call each, after the
compiling one), then a `jax.profiler` trace of a third call summed by XLA op
(the instruction's name without its number: ``ynn_fusion`` are the matrix
products, ``ffi_call`` the CPU decode-attention kernel). An op's seconds are
its wall time on the thread that ran it, so ops that ran side by side both
count. The XLA flag above, set before JAX starts, asks XLA:CPU for the op
events; the script says so when none came. A script, not a test: wall
times, valid on an idle machine only.
"""

import argparse
import collections
import pathlib
import re
import tempfile
import time

import _path  # noqa: F401  (the repository root on sys.path)
from benchmarks import speed, xla_profile
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.rollout import JaxSamplerEngine, SamplingParams

# Trace events that are not XLA ops: the host's Python frames, the executor's own spans, and
# the decode loop's span, which holds its body's ops.
_NOT_OPS = re.compile(r"^\$|^ThunkExecutor|^SlinkyThreadPool|^PjitFunction|^np\.asarray|^while$")


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--prompts", type=int, default=64)
  ap.add_argument("--n", type=int, default=8)
  ap.add_argument("--new_tokens", type=int, default=128)
  ap.add_argument("--streams", type=int, default=1, help="calls side by side; 0: the default")
  ap.add_argument("--top", type=int, default=15)
  args = ap.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    folder = speed.write_bench_model(pathlib.Path(tmp, "model"))
    model, _ = load_hf(folder)
    tok = load_tokenizer(folder)
    profile(model, tok, args)


def profile(model, tok, args):
  """Times one call and prints the traced op seconds of another."""
  prompts = [tok.encode(p.problem + speed.SUFFIX, add_special_tokens=False)
             for p in speed.arithmetic_problems(args.prompts, seed=2)]
  streams = {"streams": args.streams} if args.streams else {}  # 0: the engine's default
  engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=model.cfg.pad_token_id, **streams)
  call = lambda seed: engine.generate(prompts, args.n, SamplingParams(
      max_new_tokens=args.new_tokens, temperature=1.0, seed=seed))
  call(0)  # compiles
  wall, cpu = time.perf_counter(), time.process_time()
  call(1)
  wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  seconds, count = collections.Counter(), collections.Counter()
  for e in xla_profile.trace_events(lambda: call(2)):
    op = re.sub(r"\.\d+$", "", e.get("name", ""))
    if e.get("ph") == "X" and "dur" in e and not _NOT_OPS.search(op):
      seconds[op] += e["dur"] / 1e6
      count[op] += 1
  total = sum(seconds.values())
  print(f"{args.prompts} prompts x n {args.n} x {args.new_tokens} new tokens, streams "
        f"{args.streams}: wall {wall:.2f} s, process CPU {cpu:.2f} s; traced XLA ops {total:.2f} s")
  if not total:
    print("no XLA op events: set XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true before JAX starts")
    return
  print("| op | seconds | share | events |\n|---|---|---|---|")
  for op, s in seconds.most_common(args.top):
    print(f"| {op} | {s:.3f} | {s / total:.1%} | {count[op]:,} |")


if __name__ == "__main__":
  main()
