"""The update's seconds against its micro-batch budget, on the model of bench_vs_trl.py.

  .venv/bin/python benchmarks/bench_update_settings.py [--settings 0,1024,640,320
                                                        --rounds 2 --steps 6]

Each setting is a ``micro_batch_tokens`` (0: the backend's choice). Every setting
runs in a process of its own (nothing compiled or cached is shared), the settings
in turn, round after round; each process runs ``--steps`` GRPO steps of
`benchmarks.speed.JaxSide` and prints the median update and step seconds of
steps 2..N. A script, not a test: wall times, valid on an idle machine only
(the load average is printed).
"""

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile


def one(tokens: int, steps: int) -> None:
  """Runs one setting in this process and prints `update_s step_s` on the last line."""
  import _path  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  from benchmarks import speed  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory() as tmp:
    folder = speed.write_bench_model(pathlib.Path(tmp, "model"))
    problems = speed.arithmetic_problems(steps * 16, seed=1)
    side = speed.JaxSide.load(folder, problems, micro_batch_tokens=tokens)
    rows = [side.step(k) for k in range(steps)]
  print(statistics.median(r["update"] for r in rows[1:]),
        statistics.median(r["step"] for r in rows[1:]))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--settings", default="0,1024,640,320",
                  help="comma-separated micro_batch_tokens (0: the backend's choice)")
  ap.add_argument("--rounds", type=int, default=2)
  ap.add_argument("--steps", type=int, default=6)
  ap.add_argument("--one", default="", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.steps < 2:
    ap.error("--steps must be at least 2: step 1 compiles and is left out")
  try:
    settings = [int(v) for v in args.settings.split(",")]
    if any(s < 0 for s in settings):
      raise ValueError
  except ValueError:
    ap.error(f"--settings {args.settings!r}: expected comma-separated token counts >= 0")
  if args.one:
    return one(int(args.one), args.steps)
  print("command:", " ".join([".venv/bin/python"] + sys.argv))
  load = os.getloadavg()[0]
  print(f"load average {load:.2f}" + ("  WARNING: not idle" if load > 0.5 else ""))
  times = {s: [] for s in settings}
  for r in range(args.rounds):
    for tokens in settings:
      out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--one",
                            str(tokens)], capture_output=True, text=True, check=True)
      update_s, step_s = (float(v) for v in out.stdout.split("\n")[-2].split())
      times[tokens].append((update_s, step_s))
      print(f"round {r + 1}: {tokens} tokens: update {update_s:.3f} s, step {step_s:.3f} s",
            flush=True)
  print(f"\nupdate seconds, median of steps 2..{args.steps}; load average at the end "
        f"{os.getloadavg()[0]:.2f}")
  print("| micro-batch tokens | " + " | ".join(f"round {r + 1}" for r in range(args.rounds))
        + " |\n|---|" + "---|" * args.rounds)
  for tokens, ts in times.items():
    print(f"| {tokens:,} | " + " | ".join(f"{u:.3f} s" for u, _ in ts) + " |")


if __name__ == "__main__":
  main()
