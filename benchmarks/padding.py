"""Padding in scoring and the update: length buckets (the old rule) against sequences packed
whole into rows (the new rule), side by side. CPU only, no model: it plans the calls
each rule makes and counts the tokens they compute.

Lengths are paper-like: prompts uniform in [100, 400] tokens, the whole sequence
lognormal with mean 1,800 (sigma 0.5), capped at 4,096 response tokens; a run of
``max_prompt_len + max_response_len`` = 2,048 + 4,096, 128 prompts x 8 samples per
step per model, 4 minibatches, ``micro_batch_tokens`` 6,144 per device, 4 devices.
A call computes every position of its (rows x length) shape, so its padding is
what the shape holds beyond the real tokens.

  .venv/bin/python benchmarks/padding.py [--steps 5 --devices 4 --budget 6144]
"""

from __future__ import annotations

import argparse

import numpy as np

import _path  # noqa: F401  (the repository root on sys.path)
from graft_jax.models.logprobs import bucket_length
from graft_jax.packing import length_packing, sequence_packing
from graft_jax.train import packed_micro_batches


def sample_lengths(rng, rows: int, mean: float = 1800.0, sigma: float = 0.5,
                   response_cap: int = 4096) -> np.ndarray:
  """Sequence lengths (prompt + response) of one step's rows."""
  prompt = rng.integers(100, 401, rows)
  total = rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, rows).astype(np.int64)
  response = np.clip(total - prompt, 1, response_cap)
  return prompt + response


def old_scoring(lengths, cap: int, budget: int, devices: int, chunk_rows: int = 64):
  """(computed tokens, calls) of the bucket rule: chunks in the rows' order, each
  padded to its longest row's bucket, as many rows per device as fit the budget at
  the longest row's bucket (a power of two)."""
  per_device = max(1, chunk_rows // devices)
  fit = max(1, budget // bucket_length(int(max(lengths)), cap))
  rows = min(per_device, 1 << (fit.bit_length() - 1)) * devices
  computed, calls = 0, 0
  for start in range(0, len(lengths), rows):
    computed += rows * bucket_length(int(max(lengths[start:start + rows])), cap)
    calls += 1
  return computed, calls


def new_scoring(lengths, cap: int, budget: int, devices: int, chunk_rows: int = 64):
  """(computed tokens, calls) of packed scoring (`graft_jax.train.row_logprobs.score_rows`)."""
  row_length = sequence_packing.packed_row_length(cap)
  most = max(1, chunk_rows // devices)
  rows = min(sequence_packing.rows_per_call(budget, row_length, most), most) * devices
  calls = sequence_packing.plan_calls(lengths, row_length, rows)
  return sum(rows * length for _, length in calls), len(calls)


def update_tokens(lengths, cap: int, budget: int, devices: int, minibatches: int, packed: bool):
  """(computed tokens, micro-batches) of one epoch's update over ``lengths``."""
  width = bucket_length(cap, cap)
  per_mb = -(-len(lengths) // minibatches)
  computed, calls = 0, 0
  for start in range(0, len(lengths), per_mb):
    mb = lengths[start:start + per_mb]
    if packed:
      plan, _ = packed_micro_batches.plan(mb, width, budget, devices, num_rows=len(mb))
    else:
      plan = length_packing.plan_micro_batches(mb, width, budget, devices, num_rows=len(mb))
    computed += sum(rows * length for _, rows, length in plan)
    calls += len(plan)
  return computed, calls


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--devices", type=int, default=4)
  parser.add_argument("--budget", type=int, default=6144, help="micro_batch_tokens per device")
  parser.add_argument("--rows", type=int, default=128 * 8, help="rows per step per model")
  parser.add_argument("--minibatches", type=int, default=4)
  parser.add_argument("--cap", type=int, default=2048 + 4096,
                      help="max_prompt_len + max_response_len")
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  totals = {}
  real = 0
  for _ in range(args.steps):
    lengths = sample_lengths(rng, args.rows)
    real += int(lengths.sum())
    cells = {
        ("scoring", "buckets"): old_scoring(lengths, args.cap, args.budget, args.devices),
        ("scoring", "packed"): new_scoring(lengths, args.cap, args.budget, args.devices),
        ("update", "buckets"): update_tokens(lengths, args.cap, args.budget, args.devices,
                                             args.minibatches, packed=False),
        ("update", "packed"): update_tokens(lengths, args.cap, args.budget, args.devices,
                                            args.minibatches, packed=True),
    }
    for key, (computed, calls) in cells.items():
      c, n = totals.get(key, (0, 0))
      totals[key] = (c + computed, n + calls)
  bound = -(-real // (args.budget * args.devices)) / args.steps + 1
  print(f"{args.steps} steps of {args.rows} rows, mean length {real / args.steps / args.rows:.0f}, "
        f"budget {args.budget} x {args.devices} devices (calls bound ~{bound:.0f} per step)")
  print(f"{'phase':8} {'rule':8} {'padding':>8} {'calls/step':>11}")
  for (phase, rule), (computed, calls) in totals.items():
    pad = sequence_packing.padding_fraction(real, computed)
    print(f"{phase:8} {rule:8} {pad:8.1%} {calls / args.steps:11.1f}")


if __name__ == "__main__":
  main()
