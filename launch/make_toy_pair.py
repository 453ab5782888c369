"""Build (or reuse) the toy heterogeneous pair and print its pass-rate table.

  python launch/make_toy_pair.py [--root runs/toy_pair] [--seed 0] [--force]
"""

import argparse
import logging
import time

from graft_jax import toy
from graft_jax.toy.evaluate import format_table, pass_rate_table
from graft_jax.toy.pair import BUILD_FILE


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--root", default=toy.DEFAULT_ROOT)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--force", action="store_true", help="rebuild even if cached")
  args = parser.parse_args()
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  logging.getLogger("jax").setLevel(logging.WARNING)
  cfg = toy.default_config(args.seed)
  start = time.perf_counter()
  pair = toy.ensure_toy_pair(args.root, cfg, force=args.force)
  record = pair.record
  if "pass_rates" not in record:  # built by a caller that skipped the evaluation
    record["pass_rates"] = pass_rate_table([pair.model_a, pair.model_b], cfg)
    (pair.root / BUILD_FILE).write_text(__import__("json").dumps(record, indent=2))
  for m in record["models"]:
    print(f"{m['name']}: {m['model_type']}, {m['params']:,} params, vocab {m['vocab_size']}, "
          f"{m['train_rows']} train problems, loss {m['first_loss']:.2f} -> "
          f"{m['final_loss']:.3f}, {m['seconds']:.0f}s")
  what = "built" if pair.built else "reused (cached)"
  print(f"{what} {pair.model_a} and {pair.model_b} (key {pair.key}) in "
        f"{time.perf_counter() - start:.0f}s; build took {record['total_seconds']:.0f}s")
  print(f"pass rate at T=1 on held-out problems ({cfg.eval_per_family} per family, "
        f"{cfg.eval_samples} samples each; rows: model, columns: family group):")
  print(format_table(record["pass_rates"], [g for g, _ in cfg.groups]))


if __name__ == "__main__":
  main()
