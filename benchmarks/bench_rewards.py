"""Reward throughput on a typical mixed GRPO batch (prints one json line).

Usage: .venv/bin/python benchmarks/bench_rewards.py [--mix math|uniform|synthetic]
           [--groups 128] [--n 8] [--repeats 3] [--workers N]

A batch is G groups of n responses to the same gold answer (a GRPO step), each
repeat a freshly seeded batch, scored by `graft_jax.rewards.score` through one
pool. Besides wall-clock items/s it prints items per CPU-second of the parent
plus workers, which does not depend on what else the machine is running.
"""

import argparse
import json
import os
import random
import statistics
import time

from graft_jax import data
from graft_jax import rewards

_FILLER = ("Let's think step by step. First we simplify the expression and "
           "collect like terms, then we check the result. ")


# Answer types of MATH-style golds and their weights. "math": roughly MATH's
# mix (mostly integers); "uniform": every type equally likely (harsher: sympy
# is slowest on radicals, intervals and polynomials).
# "synthetic": golds of the embedded default's tasks (graft_jax.data.synthetic).
MIXES = {
    "math": (0.60, 0.15, 0.08, 0.05, 0.05, 0.07),
    "uniform": (1, 1, 1, 1, 1, 1),
    "synthetic": None,
}
_TEXT = ("Monday", "red", "even", "north", "circle", "prime")


def _synthetic_forms(rng: random.Random):
  p = data.make_synthetic(rng.choice(data.FAMILY_NAMES), 1,
                          seed=rng.randrange(10**9), difficulty=rng.randint(1, 5))[0]
  num, _, den = p.answer.partition("/")
  if den:
    return (p.answer, p.answer, f"\\frac{{{num}}}{{{den}}}",
            f"{int(num) + 1}/{den}")
  return p.answer, p.answer, f"{p.answer}.0", str(int(p.answer) + 1)


def _gold_and_forms(rng: random.Random, weights):
  """A gold and (same-form, other-form-equivalent, wrong) answers."""
  if weights is None:
    return _synthetic_forms(rng)
  a, b = rng.randint(2, 999), rng.randint(2, 97)
  kind = rng.choices(range(6), weights)[0]
  if kind == 0:
    return str(a), str(a), f"{a}.0", str(a + rng.randint(1, 9))
  if kind == 1:
    g = f"\\frac{{{a}}}{{{b}}}"
    return g, g, f"\\frac{{{2 * a}}}{{{2 * b}}}", f"\\frac{{{a + 1}}}{{{b}}}"
  if kind == 2:
    g = f"{a}\\sqrt{{2}}"
    return g, g, f"\\sqrt{{{2 * a * a}}}", f"{a}\\sqrt{{3}}"
  if kind == 3:
    g = f"({a}, {a + b}]"
    return g, g, f"\\left({a},{a + b}\\right]", f"[{a}, {a + b}]"
  if kind == 4:
    g = f"{a}x^2+{b}"
    return g, g, f"{b}+{a}x^2", f"{a}x^2-{b}"
  word, other = rng.sample(_TEXT, 2)
  return (f"\\text{{{word}}}", f"\\text{{{word}}}", f"\\textbf{{{word}}}",
          f"\\text{{{other}}}")


def make_batch(groups: int, n: int, seed: int = 0, mix: str = "math"):
  """G groups of n responses: 35% same form, 20% other form, 30% wrong,
  10% no box (answer stated in words), 5% empty box or garbage."""
  rng = random.Random(seed)
  responses, golds = [], []
  for _ in range(groups):
    gold, same, other, wrong = _gold_and_forms(rng, MIXES[mix])
    for _ in range(n):
      u = rng.random()
      if u < 0.35:
        ans = f"\\boxed{{{same}}}"
      elif u < 0.55:
        ans = f"\\boxed{{{other}}}"
      elif u < 0.85:
        ans = f"\\boxed{{{wrong}}}"
      elif u < 0.95:
        ans = f"so the final answer is ${wrong if u < 0.9 else same}$."
      else:
        ans = rng.choice(["\\boxed{}", "\\boxed{??}", "I am not sure."])
      responses.append(_FILLER * rng.randint(1, 6) + ans)
      golds.append(gold)
  return responses, golds


def _cpu_s(pids) -> float:
  """CPU seconds used so far by the parent plus the given worker processes.

  Wall-clock rates on a shared 2-core machine swing with other load; items
  per CPU-second do not, and times the core count bound the quiet wall rate.
  """
  total = time.process_time()
  tick = os.sysconf("SC_CLK_TCK")
  for pid in pids:
    with open(f"/proc/{pid}/stat") as f:
      fields = f.read().rsplit(")", 1)[1].split()
    total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
  return total


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--groups", type=int, default=128)
  parser.add_argument("--n", type=int, default=8)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--workers", type=int, default=None)
  parser.add_argument("--mix", choices=sorted(MIXES), default="math")
  args = parser.parse_args()
  with rewards.VerifierPool(args.workers) as pool:
    rewards.score(*make_batch(4, 8, seed=123), pool=pool)  # wait for start-up
    results = []
    for r in range(args.repeats):
      # A fresh seed each repeat: no answer is in the workers' caches.
      responses, golds = make_batch(args.groups, args.n, seed=r + 1,
                                    mix=args.mix)
      pids = pool.worker_pids
      cpu0, start = _cpu_s(pids), time.perf_counter()
      _, stats = rewards.score(responses, golds, pool=pool)
      secs = time.perf_counter() - start
      cpu = _cpu_s(pids) - cpu0
      results.append({"per_s": len(responses) / secs,
                      "per_cpu_s": len(responses) / cpu, **stats.as_dict()})
  total = {k: sum(x[k] for x in results) for k in
           ("total", "correct", "fast_path", "no_boxed", "parse_failures",
            "timeouts", "errors", "verified")}
  print(json.dumps({
      "mix": args.mix, "items_per_batch": args.groups * args.n,
      "workers": pool.num_workers,
      "per_s_median": round(statistics.median(x["per_s"] for x in results)),
      "per_cpu_s_median": round(
          statistics.median(x["per_cpu_s"] for x in results)),
      "per_s_each": [round(x["per_s"]) for x in results],
      "per_cpu_s_each": [round(x["per_cpu_s"]) for x in results],
      "fast_path_frac": round(total["fast_path"] / total["total"], 3),
      "verified_frac": round(total["verified"] / total["total"], 3),
      "reward_mean": round(total["correct"] / total["total"], 3),
      "counts_all_repeats": total}))

if __name__ == "__main__":
  main()
