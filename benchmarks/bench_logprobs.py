"""Memory and time of teacher-forced log-probs with the gradient: logits in blocks vs all at once.

`token_logprobs` forms the logits `chunk` positions at a time; the full path
holds B x T x V floats (and the backward pass more). On one random
Qwen3-architecture model with a real vocabulary (151,936) but small width,
this compiles value-and-grad of a weighted log-prob sum both ways and prints
XLA's temporary-buffer size for each (from the compiled program, not measured)
and the median wall time of each, side by side.

  .venv/bin/python benchmarks/bench_logprobs.py [--rows 2 --length 2048 --chunk 512]
"""

import argparse
import os
import platform
import statistics
import time

import jax
import numpy as np
from flax import nnx

from graft_jax.models import ModelConfig, init_model, token_logprobs


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=2)
  ap.add_argument("--length", type=int, default=2048)
  ap.add_argument("--vocab", type=int, default=151936)
  ap.add_argument("--hidden", type=int, default=64)
  ap.add_argument("--chunk", type=int, default=512)
  ap.add_argument("--repeats", type=int, default=3)
  args = ap.parse_args()

  cfg = ModelConfig(model_type="qwen3", vocab_size=args.vocab, hidden_size=args.hidden,
                    intermediate_size=2 * args.hidden, num_layers=1, num_heads=2,
                    num_kv_heads=1, head_dim=32, qk_norm=True,
                    max_position_embeddings=args.length)
  graphdef, state = nnx.split(init_model(cfg, rngs=nnx.Rngs(0)))
  rng = np.random.default_rng(0)
  ids = rng.integers(0, args.vocab, (args.rows, args.length)).astype(np.int32)
  attn = np.ones_like(ids, bool)
  weights = rng.standard_normal(ids.shape).astype(np.float32)

  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"jax {jax.__version__} on {jax.devices()[0].platform}")
  print(f"qwen3 hidden {args.hidden}, vocab {args.vocab}; {args.rows} rows x {args.length} "
        f"tokens; value and grad of sum(w * logp), fp32")
  results = {}
  for chunk in (args.chunk, None):
    def loss(state, chunk=chunk):
      logp = token_logprobs(nnx.merge(graphdef, state), ids, attn, chunk=chunk)
      return (weights * logp).sum()
    compiled = jax.jit(jax.value_and_grad(loss)).lower(state).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    jax.block_until_ready(compiled(state))
    times = []
    for _ in range(args.repeats):
      t = time.perf_counter()
      jax.block_until_ready(compiled(state))
      times.append(time.perf_counter() - t)
    results[chunk] = (temp, statistics.median(times))
    label = f"blocks of {chunk}" if chunk else "all at once"
    print(f"logits {label:>14}: temp buffers {temp / 2**30:7.3f} GiB, "
          f"median {statistics.median(times):.2f} s over {args.repeats}")
  (t_c, s_c), (t_f, s_f) = results[args.chunk], results[None]
  print(f"ratio blocks / all at once: memory {t_c / t_f:.3f}x, time {s_c / s_f:.2f}x")


if __name__ == "__main__":
  main()
