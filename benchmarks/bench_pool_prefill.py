"""The slot pool's prefill: each chunk over the key blocks it can see, against dense
attention over the whole cache window, side by side in one run.

A pool's cache row holds the prompt region and ``--max_new`` response slots
behind it; a prefill chunk sees the prompt region only. With attention 'dense'
every chunk scores and reads the whole window (`Attention._cached`); with
'blocked' it walks the key blocks up to its last slot
(`graft_jax.models.chunk_attention`). Every request decodes one token, so the
call is its prefills: ``--prompts`` prompts of ``--prompt_len`` tokens in chunks
of ``--chunk``, ``--group`` per batched pass. Both engines sample the same tokens
(asserted). Median of ``--reps`` timed calls after one that compiles.

  .venv/bin/python benchmarks/bench_pool_prefill.py [--prompts 64 --prompt_len 256
      --chunk 64 --group 8 --max_new 4096 --reps 3]
"""

import argparse
import statistics
import time

import _path  # noqa: F401  (puts the repository root on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.rollout import SamplingParams
from graft_jax.rollout.continuous import ContinuousSamplerEngine


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--prompts", type=int, default=64)
  ap.add_argument("--prompt_len", type=int, default=256)
  ap.add_argument("--chunk", type=int, default=64)
  ap.add_argument("--group", type=int, default=8)
  ap.add_argument("--max_new", type=int, default=4096)
  ap.add_argument("--reps", type=int, default=3)
  args = ap.parse_args()

  cfg = ModelConfig(model_type="qwen3", vocab_size=512, hidden_size=256, intermediate_size=512,
                    num_layers=2, num_heads=8, num_kv_heads=2, head_dim=32, qk_norm=True)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(3, cfg.vocab_size, args.prompt_len).tolist()
             for _ in range(args.prompts)]
  params = SamplingParams(max_new_tokens=args.max_new, temperature=1.0, seed=0)
  window = -(-args.prompt_len // args.chunk) * args.chunk + args.max_new
  print(f"{jax.default_backend()}: {args.prompts} prompts of {args.prompt_len} tokens, chunks "
        f"of {args.chunk}, {args.group} per pass, a window of {window} slots "
        f"({args.max_new} response slots); one token each")
  seconds, tokens = {}, {}
  for impl in ("dense", "blocked"):
    model = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.float32)
    model.set_memory_options(attention=impl)
    engine = ContinuousSamplerEngine(model, eos_ids=-1, pad_id=0, slots=args.group,
                                     prefill_chunk=args.chunk, prefill_group=args.group,
                                     max_prompt_len=args.prompt_len,
                                     max_new_tokens=args.max_new, max_requests=args.prompts)
    run = lambda: engine.generate(prompts, 1, params, budgets=[1] * args.prompts)
    tokens[impl] = run().tokens_BxL  # compiles
    times = []
    for _ in range(args.reps):
      start = time.perf_counter()
      run()
      times.append(time.perf_counter() - start)
    seconds[impl] = statistics.median(times)
    print(f"  {impl:>7}: {seconds[impl]:.3f} s per call (median of {args.reps}), "
          f"{args.prompts * args.prompt_len / seconds[impl]:,.0f} prompt tokens/s")
  np.testing.assert_array_equal(tokens["dense"], tokens["blocked"])
  print(f"  the block walk in {seconds['blocked'] / seconds['dense']:.2f}x dense's time "
        f"({seconds['dense'] / seconds['blocked']:.2f}x faster); the same tokens")


if __name__ == "__main__":
  main()
