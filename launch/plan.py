"""What a run config needs per device and how long its steps take, before any weights exist.

  .venv/bin/python launch/plan.py --config=configs/pair_smollm3_qwen3.py --devices=4 \
      --device-memory-gb=141 [--config.perf.micro_batch_tokens=...]

Memory (graft_jax.plan.run): each model's update programs, traced for
``--platform`` (default gpu: no CPU-only code) with abstract parameters, compiled by
XLA's CPU backend for ``--devices`` fake devices, their memory_analysis() read per
device; the sampler's KV cache and bf16 weights; a workspace margin; with
``engine=vllm`` each server's share. Then, at the efficiencies benchmarks/gpu_check.py
measured on one H200 (graft_jax.plan.step_time), every phase per engine as the code
runs it (graft_jax.plan.phases: the JAX sampler's calls and cache window, a vLLM
server's continuous batching, padding, rewards, exchange, compilation, validation,
checkpoints), the step, and the run's GPU-hours with and without validation; then for
the static sampler, the slot pool and vLLM, the step and GPU-hours with every stated
input at its low and high end, and the inputs that move them most (graft_jax.plan.ranges).
"""

import os
import pathlib
import sys

if __name__ == "__main__":
  devices = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--devices=")), "4")
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + f" --xla_force_host_platform_device_count={int(devices)}")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import flags  # noqa: E402

from graft_jax import cli  # noqa: E402  (after XLA_FLAGS)

_DEVICES = flags.DEFINE_integer("devices", 4, "GPUs of the node (fake CPU devices here); the "
                                "trainer's mesh spans jax_devices of them, else all")
_MEMORY = flags.DEFINE_float("device-memory-gb", 141.0, "memory of one device, GB (H200: 141)")
_RESERVE = flags.DEFINE_float("reserve-fraction", 0.0,
                              "share of each device kept for other processes (vLLM sidecars)")
_MARGIN = flags.DEFINE_float("workspace-gib", 4.0, "per device, for CUDA / cuBLAS / cuDNN / NCCL "
                             "workspaces and fragmentation")
_PROCESSES = flags.DEFINE_integer("processes", 1, "trainer processes (for the weight sync's "
                                  "gathers; one per node is usual)")
_PLATFORM = flags.DEFINE_enum("platform", "gpu", ["cpu", "gpu", "tpu"],
                              "the backend the programs are traced for")
_PEAK = flags.DEFINE_float("peak-tflops", 989.0, "dense bf16 peak per device (H200: 989)")
_HBM = flags.DEFINE_float("hbm-tbps", 4.8, "HBM bandwidth per device, TB/s (H200: 4.8)")
_PROMPT = flags.DEFINE_float("mean-prompt-tokens", 256, "mean prompt length (MATH: a few hundred)")
_EXCHANGE = flags.DEFINE_float("exchange-fraction", 0.25,
                               "GRAFT: share of prompts whose peer rows the gate scores")
_MEAN = flags.DEFINE_float("response-mean", 1200, "mean response tokens, clipped at the cap "
                           "(docs/plan.md)")
_SHAPE = flags.DEFINE_float("response-shape", 2.0, "gamma shape of the response lengths")
_LONGEST = flags.DEFINE_integer("prompt-longest", 400, "longest prompt of a sampler call "
                                "(its prompt bucket)")
_SIGNAL = flags.DEFINE_float("signal-fraction", 0.6, "share of rows in groups with mixed rewards")
_COMPILE = flags.DEFINE_float("compile-s", 40.0, "seconds to compile one program")
_DISK = flags.DEFINE_float("disk-gbps", 1.0, "checkpoint write rate, GB/s (synchronous saves)")
_TRAIN = flags.DEFINE_integer("train-prompts", 0, "train prompts (0: lines of data.train_path, "
                              "else 7,500, MATH train)")

MATH_TRAIN_PROMPTS = 7500


def train_prompts(cfg) -> int:
  if _TRAIN.value:
    return _TRAIN.value
  path = pathlib.Path(cfg.data.train_path)
  if cfg.data.train_path and path.is_file():
    with path.open("rb") as f:
      return sum(1 for line in f if line.strip())
  return MATH_TRAIN_PROMPTS


def main(config_dict):
  import dataclasses  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  from graft_jax.plan import run, step_time  # pylint: disable=import-outside-toplevel
  from graft_jax.config.checks import policy_configs  # pylint: disable=import-outside-toplevel
  from graft_jax.config.placement import sync_backend  # pylint: disable=import-outside-toplevel

  from graft_jax.train import methods  # pylint: disable=import-outside-toplevel
  cfg = methods.from_config_dict(config_dict)
  margin = int(_MARGIN.value * 2**30)
  trainer = run.trainer_devices(cfg, _DEVICES.value)  # the mesh: the trainer's GPUs
  mesh, available, table = run.plan(cfg, jax.devices()[:trainer],
                                    int(_MEMORY.value * 1e9), reserve_fraction=_RESERVE.value,
                                    platform=_PLATFORM.value, margin_bytes=margin)
  print(run.format_plan(mesh, available, table, cfg.max_prompt_len + cfg.max_response_len,
                        margin))
  servers = run.server_budgets(cfg, int(_MEMORY.value * 1e9))
  if servers:
    print(run.format_servers(servers))
  sync = sync_backend(cfg, on_gpu=True, processes=_PROCESSES.value)
  placed = run.placement(cfg, _DEVICES.value, int(_MEMORY.value * 1e9), table, servers, margin)
  print("\n" + run.format_placement(placed, int(_MEMORY.value * 1e9), sync))
  peaks = dict(peak_flops=_PEAK.value * 1e12, hbm_bytes_per_s=_HBM.value * 1e12)
  measured = dataclasses.replace(step_time.MEASURED_H200, **peaks)
  models = {m.name: run.model_config(m) for m in policy_configs(cfg)}
  steps = step_time.run_steps(cfg, train_prompts(cfg))
  if cfg.engine == "vllm":
    print("\n" + step_time.format_sync_choices(models, _PROCESSES.value, sync))
  print_phases(cfg, models, trainer, measured, steps, sync)
  return 0 if all(r["fits"] for r in table + servers + placed) else 1


def print_phases(cfg, models, devices, rates, steps, sync):
  """Every phase per engine, as the code runs it (graft_jax.plan.phases)."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  from graft_jax.plan import phases, server_layout  # pylint: disable=import-outside-toplevel
  from graft_jax.plan.lengths import ResponseLengths  # pylint: disable=import-outside-toplevel
  lengths = ResponseLengths(cfg.max_response_len, min(_MEAN.value, cfg.max_response_len - 1),
                            _SHAPE.value)
  a = phases.Assumptions(lengths=lengths, prompt_mean=_PROMPT.value,
                         prompt_longest=_LONGEST.value, exchange_fraction=_EXCHANGE.value,
                         signal_fraction=_SIGNAL.value, compile_s_per_program=_COMPILE.value,
                         disk_bytes_per_s=_DISK.value * 1e9, device_bytes=_MEMORY.value * 1e9)
  print(f"\nEvery phase per engine at the H200 check's rates; responses: mean "
        f"{lengths.expected():.0f} of {lengths.cap} tokens, gamma shape {lengths.shape}, "
        f"{lengths.truncated:.1%} at the cap; prompts: mean {_PROMPT.value:.0f}, longest "
        f"{_LONGEST.value}; {_SIGNAL.value:.0%} of rows with a signal (docs/plan.md)")
  sync = sync if cfg.engine == "vllm" else "nccl"
  print(phases.format_plan(phases.plan_engine(cfg, models, "jax", devices, rates, a, steps),
                           models))
  # vLLM's two placements of a node side by side (graft_jax.plan.server_layout).
  replicas = dataclasses.replace(server_layout.REPLICAS_4, replicas=devices)
  mine = server_layout.from_config(cfg) if cfg.engine == "vllm" else replicas
  d, r = (phases.plan_engine(cfg, models, "vllm", devices, rates, a, steps, sync=sync,
                             layout=layout) for layout in (server_layout.DEDICATED, mine))
  print(phases.format_plan(r, models) + f"\n  servers: {mine.describe()}")
  print(f"\nvLLM placements: {mine.describe()} | {server_layout.DEDICATED.describe()}\n"
        f"  sampling per step {r.phase_seconds('sampling'):.1f} s vs "
        f"{d.phase_seconds('sampling'):.1f} s "
        f"({r.phase_seconds('sampling') / d.phase_seconds('sampling'):.2f}x); "
        f"step {r.step_seconds:.0f} s vs {d.step_seconds:.0f} s; run {r.gpu_hours(True):.0f} vs "
        f"{d.gpu_hours(True):.0f} GPU-hours with validation")
  from graft_jax.plan import ranges  # pylint: disable=import-outside-toplevel
  print("\nEach engine with every stated input (graft_jax.plan.inputs) at its ends, one at a "
        "time and together:")
  for rng in ranges.engine_ranges(cfg, models, devices, rates, a, steps, sync=sync, layout=mine):
    print(ranges.format_range(rng))


if __name__ == "__main__":
  cli.run(main, default_config=None, config_help="a run config file (a pair or `models`)")
