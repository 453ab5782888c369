"""The rate of one decode step's matrix products at the sampler's shapes, against the matmul ceiling.

  .venv/bin/python benchmarks/bench_decode_products.py [--settings 128x4,128x2,256x2,512x1,128x1]

One decode step's projections of the speed benchmark's model
(`benchmarks.speed.write_bench_model`: per layer q, k, v, o, gate,
up and down, then the tied head), as one jitted chain on random f32 inputs of
``rows`` rows, called from ``calls`` host threads side by side (the sampler's
calls side by side, `JaxSamplerEngine`'s ``streams``): 20 calls per thread,
best of 5 rounds. Prints each setting's GFLOP/s and its share of the f32
2048^3 matmul ceiling (`speed.matmul_flops_per_s`), measured before and after.
A script, not a test: wall times, valid on an idle machine only.
"""

import argparse
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

import _path  # noqa: F401  (the repository root on sys.path)
from benchmarks import speed

CFG = speed.bench_model_config(vocab_size=1024, eos_id=0, pad_id=0)
D, F, Q, KV = (CFG.hidden_size, CFG.intermediate_size, CFG.num_heads * CFG.head_dim,
               CFG.num_kv_heads * CFG.head_dim)
SHAPES = [(D, Q), (D, KV), (D, KV), (Q, D), (D, F), (D, F), (F, D)] * CFG.num_layers + [
    (D, CFG.vocab_size)]


def products(x_MxD, weights):
  """Each weight applied to x (x tiled to the weight's input width); the sum of every output."""
  total = 0.0
  for w in weights:
    total = total + (jnp.tile(x_MxD, (1, w.shape[0] // D)) @ w).sum()
  return total


def rate(rows: int, calls: int, weights, step, repeats: int = 20) -> float:
  """FLOP/s of ``calls`` threads each running the chain ``repeats`` times (best of 5)."""
  rng = np.random.default_rng(1)
  xs = [jnp.asarray(rng.standard_normal((rows, D), np.float32)) for _ in range(calls)]
  for x in xs:
    step(x, weights).block_until_ready()
  flops = sum(2 * rows * a * b for a, b in SHAPES) * calls * repeats

  def run(x):
    for _ in range(repeats):
      step(x, weights).block_until_ready()

  best = float("inf")
  for _ in range(5):
    threads = [threading.Thread(target=run, args=(x,)) for x in xs]
    t = time.perf_counter()
    for th in threads:
      th.start()
    for th in threads:
      th.join()
    best = min(best, time.perf_counter() - t)
  return flops / best


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--settings", default="128x4,128x2,256x2,512x1,128x1",
                  help="rows x calls side by side, comma-separated")
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  weights = [jnp.asarray(rng.standard_normal(s, np.float32) * 0.05) for s in SHAPES]
  step = jax.jit(products)
  before = speed.matmul_flops_per_s()
  print(f"f32 2048^3 matmul ceiling before: {before / 1e9:.0f} GFLOP/s")
  print("| rows x calls side by side | GFLOP/s | share of the ceiling |\n|---|---|---|")
  for setting in args.settings.split(","):
    rows, calls = map(int, setting.split("x"))
    r = rate(rows, calls, weights, step)
    print(f"| {rows} x {calls} | {r / 1e9:.0f} | {r / before:.0%} |")
  print(f"ceiling after: {speed.matmul_flops_per_s() / 1e9:.0f} GFLOP/s")


if __name__ == "__main__":
  main()
