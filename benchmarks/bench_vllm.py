"""vLLM sidecar vs the JAX sampler on one tiny model: tokens/s, weight-sync time, start time.

One run measures all three on the same random Llama-architecture weights
(head_dim 64, fp32) and the same batch, with EOS off so both sample exactly
prompts x n x new_tokens tokens at T=1. Needs .venv-vllm (`make vllm-venv`).

  .venv/bin/python benchmarks/bench_vllm.py [--prompts 32 --n 8 --new_tokens 64 --repeats 3]
"""

import argparse
import os
import platform
import statistics
import tempfile
import time

import jax
import numpy as np
from flax import nnx

from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.rollout.vllm_engine import VLLMEngine
from graft_jax.rollout.vllm_sidecar import SidecarOptions


def _timed(fn, repeats):
  times = []
  for seed in range(repeats):
    t = time.perf_counter()
    fn(seed)
    times.append(time.perf_counter() - t)
  return statistics.median(times)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--hidden", type=int, default=256)
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--vocab", type=int, default=8192)
  ap.add_argument("--prompts", type=int, default=32)
  ap.add_argument("--n", type=int, default=8)
  ap.add_argument("--new_tokens", type=int, default=64)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--syncs", type=int, default=5)
  ap.add_argument("--python", default=".venv-vllm/bin/python")
  ap.add_argument("--run_root", default=None, help="where the server log goes (a temp folder)")
  args = ap.parse_args()

  cfg = ModelConfig(model_type="llama", vocab_size=args.vocab, hidden_size=args.hidden,
                    intermediate_size=3 * args.hidden, num_layers=args.layers, num_heads=4,
                    num_kv_heads=2, head_dim=args.hidden // 4, tie_word_embeddings=True,
                    max_position_embeddings=1024)
  model = init_model(cfg, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  prompts = [rng.integers(3, args.vocab, rng.integers(16, 33)).tolist()
             for _ in range(args.prompts)]
  total = args.prompts * args.n * args.new_tokens
  params = lambda seed: SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0,
                                       seed=seed)
  # EOS -1 never matches: every row runs the full budget on both engines.
  jax_engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=0)
  opts = SidecarOptions(python=args.python, dtype="float32", max_model_len=256,
                        enforce_eager=True)
  with tempfile.TemporaryDirectory(dir=args.run_root) as run_dir:
    vllm = VLLMEngine(model, eos_ids=[-1], pad_id=0, run_dir=run_dir, options=opts,
                      name="bench", check_every=0)
    try:
      vllm.generate(prompts[:1], 1, params(0))  # waits for the server; start time below
      start_s = vllm.sidecar.last_start_s
      for engine in (jax_engine, vllm):
        assert int(engine.generate(prompts, args.n, params(0)).mask_BxL.sum()) == total
      jax_s = _timed(lambda s: jax_engine.generate(prompts, args.n, params(s)), args.repeats)
      vllm_s = _timed(lambda s: vllm.generate(prompts, args.n, params(s)), args.repeats)
      _, state = nnx.split(model)
      write, reload = [], []
      for i in range(args.syncs):
        vllm.set_weights(jax.tree.map(lambda x, i=i: x * (1.0 + 1e-3 * (i + 1)), state))
        write.append(vllm.last_sync_metrics["vllm_write_s"])
        reload.append(vllm.last_sync_metrics["vllm_reload_s"])
      t = time.perf_counter()
      probe = vllm._probe()
      probe_s = time.perf_counter() - t
    finally:
      vllm.close()

  mb = sum(x.nbytes for x in jax.tree.leaves(state)) / 2**20
  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
  print(f"model: llama hidden {args.hidden}, {args.layers} layers, head_dim {args.hidden // 4}, "
        f"vocab {args.vocab}, fp32 ({mb:.1f} MiB); batch {args.prompts} x n {args.n}, "
        f"{args.new_tokens} new tokens, T=1, EOS off")
  print(f"jax sampler:       {total / jax_s:8.0f} tok/s  (median of {args.repeats}: {jax_s:.2f} s)")
  print(f"vLLM sidecar:      {total / vllm_s:8.0f} tok/s  (median of {args.repeats}: "
        f"{vllm_s:.2f} s)")
  print(f"ratio vLLM / jax:  {jax_s / vllm_s:.2f}x")
  print(f"weight sync per step (median of {args.syncs}): write {statistics.median(write):.3f} s"
        f" + reload {statistics.median(reload):.3f} s; probe check {probe_s:.3f} s "
        f"(max gap {probe['vllm_probe_max_abs']:.1e})")
  print(f"server start (spawn -> healthy, --enforce-eager): {start_s:.1f} s")


if __name__ == "__main__":
  main()
