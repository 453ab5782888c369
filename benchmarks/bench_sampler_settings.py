"""The JAX sampler's call under several settings, paired round by round in one process.

  .venv/bin/python benchmarks/bench_sampler_settings.py [--settings 4:kernel,2:kernel,1:kernel,4:xla
                                                         --rounds 10 --prompts 64 --n 8 --new_tokens 128]

Each setting is ``streams:attention``: the engine's calls side by side
(`JaxSamplerEngine`'s ``streams``) and the decode step's attention (``kernel``,
the CPU decode kernel where it applies, or ``xla``; `Decoder.set_decode_attention`).
One engine per setting, all on the speed benchmark's model
(`benchmarks.speed.write_bench_model`) and work (arithmetic prompts,
EOS off, T = 1, fp32), each compiled before timing. Each round calls every
engine once, in the given order in even rounds and reversed in odd ones, and
divides each setting's seconds by the first setting's in the same round. On a
VM whose speed drifts by a tenth within minutes, these per-round ratios decide
between settings where medians taken in separate processes do not. Prints
each setting's median seconds and tokens/s, and the median, smallest and
largest of its ratio to the first. A script, not a test: wall times, valid on
an idle machine only (the load average is printed at the start and the end).
"""

import argparse
import os
import pathlib
import statistics
import tempfile
import time

import _path  # noqa: F401  (the repository root on sys.path)
from benchmarks import speed
from graft_jax.backends.cpu import decode_kernel
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.rollout import JaxSamplerEngine, SamplingParams

ATTENTION = ("kernel", "xla")


def parse_settings(text: str) -> list[tuple[int, str]]:
  """``"4:kernel,2:xla"`` -> [(4, "kernel"), (2, "xla")]; one clear line on a bad entry."""
  out = []
  for entry in text.split(","):
    streams, _, attention = entry.partition(":")
    attention = attention or "kernel"
    if not streams.isdigit() or int(streams) < 1 or attention not in ATTENTION:
      raise SystemExit(f"--settings: {entry!r} is not streams:attention (streams >= 1, "
                       f"attention one of {', '.join(ATTENTION)})")
    out.append((int(streams), attention))
  return out


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--settings", default="4:kernel,2:kernel,1:kernel,4:xla",
                  help="comma-separated streams:attention; the first is the baseline")
  ap.add_argument("--rounds", type=int, default=10)
  ap.add_argument("--prompts", type=int, default=64)
  ap.add_argument("--n", type=int, default=8)
  ap.add_argument("--new_tokens", type=int, default=128)
  args = ap.parse_args()
  settings = parse_settings(args.settings)
  for name in ("rounds", "prompts", "n", "new_tokens"):
    if getattr(args, name) < 1:
      raise SystemExit(f"--{name}: must be at least 1, got {getattr(args, name)}")
  why_not = decode_kernel.unavailable_reason()
  if why_not is not None and any(a == "kernel" for _, a in settings):
    raise SystemExit(f"--settings: 'kernel' asked for, but the CPU decode kernel {why_not}")
  print(f"load average at the start: {os.getloadavg()[0]:.2f}")
  with tempfile.TemporaryDirectory() as tmp:
    folder = speed.write_bench_model(pathlib.Path(tmp, "model"))
    tok = load_tokenizer(folder)
    engines = []
    for streams, attention in settings:
      model, _ = load_hf(folder)
      model.set_decode_attention(attention)
      engines.append(JaxSamplerEngine(model, eos_ids=[-1], pad_id=model.cfg.pad_token_id,
                                      streams=streams))
  prompts = [tok.encode(p.problem + speed.SUFFIX, add_special_tokens=False)
             for p in speed.arithmetic_problems(args.prompts, seed=2)]
  params = lambda seed: SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=seed)
  total = args.prompts * args.n * args.new_tokens
  for engine in engines:  # compiles; EOS -1 keeps every row to the full budget
    assert int(engine.generate(prompts, args.n, params(0)).mask_BxL.sum()) == total
  seconds = [[] for _ in settings]
  for r in range(args.rounds):
    order = range(len(settings)) if r % 2 == 0 else reversed(range(len(settings)))
    for i in order:
      t = time.perf_counter()
      engines[i].generate(prompts, args.n, params(r + 1))
      seconds[i].append(time.perf_counter() - t)
  print(f"{args.prompts} prompts x n {args.n} x {args.new_tokens} new tokens = {total} tokens, "
        f"EOS off, T=1, fp32; {args.rounds} rounds")
  print("| streams:attention | median s | tokens/s | ratio to the first: median | smallest | "
        "largest |\n|---|---|---|---|---|---|")
  for (streams, attention), ts in zip(settings, seconds):
    ratios = [a / b for a, b in zip(ts, seconds[0])]
    med = statistics.median(ts)
    print(f"| {streams}:{attention} | {med:.2f} | {total / med:,.0f} | "
          f"{statistics.median(ratios):.3f} | {min(ratios):.3f} | {max(ratios):.3f} |")
  print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
