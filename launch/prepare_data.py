"""Write the paper's training set and five benchmarks where the pair configs read them.

  .venv/bin/python launch/prepare_data.py [--root data] [--only MATH500,AIME24]

Writes <root>/math/train.jsonl (the pair configs' data.train_path) and
<root>/eval/{math500,aime24,aime25,amc23,minerva}.jsonl (their eval.data_dir) from
the Hub dataset repos of `graft_jax.data.prepare.SOURCES` (docs/evaluation.md says
why each). Every file is checked (row count, each row converted or named, the
content hash once pinned) and written whole or not at all; <root>/prepared.json
records each one's commit and sha256, so a rerun verifies and skips, and
HF_HUB_OFFLINE=1 prepares again from the Hugging Face cache. A source that fails
is one line and exit 1; the others are still prepared.
"""

import argparse
import sys

from graft_jax import cli
from graft_jax.data import prepare


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--root", default="data", help="where math/ and eval/ go (default: data)")
  parser.add_argument("--only", default="", help="comma-separated source names (default: all)")
  args = parser.parse_args()
  names = [n.strip() for n in args.only.split(",") if n.strip()]
  known = {s.name for s in prepare.SOURCES}
  if set(names) - known:
    raise cli.UsageError(f"--only: unknown {sorted(set(names) - known)}; known: "
                         f"{', '.join(sorted(known))}")
  failed = 0
  for source in prepare.SOURCES:
    if names and source.name not in names:
      continue
    try:
      done = prepare.prepare(source, args.root)
    except prepare.PrepareError as e:
      print(cli.one_line(e), file=sys.stderr)
      failed += 1
      continue
    how = "verified, skipped" if done.skipped else f"from {source.repo}@{done.commit}"
    print(f"{source.name}: {done.path}, {done.rows} rows ({how})")
    if done.dropped:
      print(f"  {len(done.dropped)} row(s) the reward cannot read, left out:")
      for rid, why in done.dropped.items():
        print(f"    {rid}: {why}")
  return 1 if failed else 0


if __name__ == "__main__":
  cli.guard(main)
