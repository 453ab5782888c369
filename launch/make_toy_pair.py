"""Build (or reuse) the toy heterogeneous pair and print its pass-rate table.

  python launch/make_toy_pair.py [--regime friction] [--root runs/toy_pair] [--force]
  python launch/make_toy_pair.py --ship    # rebuild graft_jax/toy/prebuilt (the shipped pair)
  python launch/make_toy_pair.py --check   # rebuild in a temporary folder, compare with it

`--regime friction` builds the second regime's pair (memorized shortcuts,
`graft_jax.toy.friction`) under runs/toy_friction, shipped in
graft_jax/toy/prebuilt_friction.

A build is deterministic on a given kind of processor. `--check` exits 0 when
every file of both model folders matches the shipped pair's recorded sha256, or,
on a processor unlike the one that built it, when only the weights differ and
the rebuilt pair's held-out competence matches (graft_jax/toy/rebuild_check.py).
"""

import argparse
import json
import logging
import sys
import time

from graft_jax import toy
from graft_jax.toy import pair as pair_lib
from graft_jax.toy import rebuild_check, spec
from graft_jax.toy.skill_table import format_table, pass_rate_table


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--regime", choices=sorted(spec.REGIMES), default="default")
  parser.add_argument("--root", default=None, help="default: the regime's (runs/toy_pair)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--force", action="store_true", help="rebuild even if cached")
  parser.add_argument("--ship", action="store_true", help="build into graft_jax/toy/prebuilt")
  parser.add_argument("--check", action="store_true", help="rebuild and compare with the shipped pair")
  args = parser.parse_args()
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  logging.getLogger("jax").setLevel(logging.WARNING)
  regime = spec.REGIMES[args.regime]
  cfg = regime.config(args.seed)
  start = time.perf_counter()
  if args.check:
    result = rebuild_check.check(cfg)
    print(f"rebuilt in {time.perf_counter() - start:.0f}s")
    print("\n".join(result.lines()))
    sys.exit(0 if result.ok else 1)
  root = pair_lib.shipped_dir(cfg) if args.ship else args.root or regime.root
  pair = toy.ensure_toy_pair(root, cfg, force=args.force or args.ship)
  record = pair.record
  if "pass_rates" not in record:  # built by a caller that skipped the evaluation
    record["pass_rates"] = pass_rate_table([pair.model_a, pair.model_b], cfg)
    (pair.root / pair_lib.BUILD_FILE).write_text(json.dumps(record, indent=2))
  for m in record["models"]:
    print(f"{m['name']}: {m['model_type']}, {m['params']:,} params, vocab {m['vocab_size']}, "
          f"{m['train_rows']} train rows, loss {m['first_loss']:.2f} -> "
          f"{m['final_loss']:.3f}, {m['seconds']:.0f}s")
  what = "built" if pair.built else "reused (cached or shipped)"
  print(f"{what} {pair.model_a} and {pair.model_b} (key {pair.key}) in "
        f"{time.perf_counter() - start:.0f}s; build took {record['total_seconds']:.0f}s")
  print(f"pass rate at T=1 on held-out problems ({cfg.eval_per_family} per family, "
        f"{cfg.eval_samples} samples each), and the share of samples choosing the correct "
        f"procedure:")
  print(format_table(record["pass_rates"], [g for g, _ in cfg.groups]))


if __name__ == "__main__":
  main()
