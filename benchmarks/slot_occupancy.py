"""Mean slot occupancy of the slot pool vs a static batch, on the same long-tailed work.

Response lengths follow the paper-scale distribution scaled down for a CPU:
lognormal with mean 1,800 tokens before a cap of 4,096 (sigma chosen so that
about 5% reach the cap), every length divided by ``--scale``. EOS is off and
each response's budget is its drawn length, so both schedules do exactly the
same work. The pool refills a slot as soon as its response ends
(`graft_jax.rollout.continuous.ContinuousSamplerEngine`); the static batch
(``refill=False``) fills the empty pool and decodes until its longest row
stops, as `graft_jax.rollout.jax_engine.JaxSamplerEngine` does per call.
Both are counted by the same on-device counters in one run. Occupancy is busy
slot-steps over the slot-steps of the pool sizes that ran (the pool's drain
halves it, `--shrinks` times at most); "whole pool" counts every step at the
full size instead. Shrinking changes no decode step count, only each drain
step's width. "Free slots' KV" is what the rows without a request attend to
per step (each its own write slot), beside the busy rows' live KV. The third row
refills only once ``--refill_at`` slots are free (`refill_at`), a group of that many
prompts a pass: its prefill passes against the pool that refills each slot at once.

  .venv/bin/python benchmarks/slot_occupancy.py [--prompts 32 --n 8 --slots 32 --scale 64
      --shrinks 2 --refill_at 8]
"""

import argparse
import math
import time

import _path  # noqa: F401  (puts the repository root on sys.path)
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.rollout import SamplingParams
from graft_jax.rollout.continuous import ContinuousSamplerEngine

MEAN, CAP, AT_CAP = 1800.0, 4096, 0.05


def lognormal_lengths(count: int, scale: int, seed: int) -> np.ndarray:
  """``count`` lengths, lognormal with mean MEAN and P(> CAP) = AT_CAP, capped at CAP,
  divided by ``scale`` (at least 1)."""
  z = 1.6448536269514722  # the standard normal's 95th percentile
  # mu + z sigma = ln CAP and mu + sigma^2 / 2 = ln MEAN: the smaller root in sigma.
  gap = math.log(CAP) - math.log(MEAN)
  sigma = z - math.sqrt(z * z - 2 * gap)
  mu = math.log(MEAN) - sigma * sigma / 2
  raw = np.random.default_rng(seed).lognormal(mu, sigma, count)
  return np.maximum(1, np.round(np.minimum(raw, CAP) / scale)).astype(int)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--prompts", type=int, default=32)
  ap.add_argument("--n", type=int, default=8)
  ap.add_argument("--slots", type=int, default=32)
  ap.add_argument("--scale", type=int, default=64)
  ap.add_argument("--prompt_len", type=int, default=16)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--shrinks", type=int, default=2)
  ap.add_argument("--refill_at", type=int, default=8)  # also the prefill group
  args = ap.parse_args()

  cfg = ModelConfig(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=128,
                    num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)
  model = init_model(cfg, rngs=nnx.Rngs(args.seed), param_dtype=jnp.float32)
  rng = np.random.default_rng(args.seed)
  prompts = [rng.integers(3, cfg.vocab_size, args.prompt_len).tolist()
             for _ in range(args.prompts)]
  budgets = lognormal_lengths(args.prompts * args.n, args.scale, args.seed)
  cap = -(-CAP // args.scale)
  params = SamplingParams(max_new_tokens=cap, temperature=1.0, seed=args.seed)
  print(f"{args.prompts} prompts x {args.n} = {len(budgets)} responses, lengths / {args.scale}: "
        f"mean {budgets.mean():.1f}, max {budgets.max()}, at the cap "
        f"{np.mean(budgets >= cap):.1%}; {args.slots} slots")
  rows = (("static batch", False, 1), ("slot pool", True, 1),
          (f"refill at {args.refill_at}", True, args.refill_at))
  for name, refill, refill_at in rows:
    engine = ContinuousSamplerEngine(model, eos_ids=-1, pad_id=0, slots=args.slots,
                                     max_prompt_len=args.prompt_len, refill=refill,
                                     shrinks=args.shrinks, prefill_group=args.refill_at,
                                     refill_at=refill_at)
    start = time.perf_counter()
    batch = engine.generate(prompts, args.n, params, budgets=budgets.tolist())
    seconds = time.perf_counter() - start
    assert (batch.lengths_B == budgets).all()
    m = engine.last_metrics
    print(f"{name:>12}: occupancy {m['slot_occupancy']:.1%} (whole pool "
          f"{m['slot_occupancy_full_pool']:.1%}), {m['decode_steps']:.0f} decode steps, "
          f"{m['tokens']:.0f} tokens, live KV {m['live_kv_bytes_per_step'] / 2**10:.1f} KiB/step, "
          f"free slots' KV {m['idle_kv_bytes_per_step'] / 2**10:.1f} KiB/step, "
          f"{m['prefill_passes']:.0f} prefill passes "
          f"({seconds:.1f} s, compile included)")


if __name__ == "__main__":
  main()
