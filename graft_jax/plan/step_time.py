"""An estimated step time and a run's GPU-hours from FLOPs, bytes and stated rates.

Per model and step, with P prompts of n samples (R = P n rows) on D devices, mean
prompt length L_p, response cap L_r and mean response length r = f L_r
(`graft_jax.plan.costs` gives F and B):

- sampling: the decode loop runs L_r steps (a batch lasts as long as its longest
  row), each reading every weight once per device, and every row reads its cache
  until it finishes; prefill is one forward pass over the prompts:

  .. math::
      t_{sample} = \\max\\Big(\\frac{L_r\\, w N_{all} + \\frac{R}{D}\\,
      \\mathrm{kv}\\,(r L_p + r (r+1)/2)}{\\eta_{hbm} \\beta},\\;
      \\frac{R\\, r\\, F_{decode}(L_p + r/2)}{D\\, \\mu_{dec} \\Phi}\\Big)
      + \\frac{R L_p F_{score}(L_p)}{D \\mu_{score} \\Phi}

- scoring: teacher-forced old log-probs over the R rows (none with
  ``old_logp_source='sampler'``), and for GRAFT the gate's pass over the peer rows
  offered (a fraction x of the prompts, times n), for HACPO a reference pass:
  :math:`t_{score} = \\frac{R' (L_p + r) F_{score}(L_p + r)}{D \\mu_{score} \\Phi}`;
- update: :math:`t_{update} = e \\frac{R (L_p + r) F_{train}(L_p + r)}{D \\mu_{train} \\Phi}`
  for e PPO epochs;
- weight sync: none for the JAX sampler (it reads the trainer's weights; the cast
  to bf16 is one pass over them), else the serving dtype's bytes over the link
  ``vllm.weight_sync`` uses.

The step is the sum over models (each phase runs on all D devices, one model after
the other). Φ is the bf16 peak, β the HBM bandwidth, η and μ the efficiencies;
the defaults are stated round figures, and `MEASURED_H200` holds the efficiencies
``benchmarks/gpu_check.py`` measured on one H200 (BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses

from graft_jax.models.config import ModelConfig
from graft_jax.plan import costs

# Per second of a link, bytes: NCCL between GPUs of one node (NVLink), CUDA IPC on one
# GPU, the safetensors round trip through /dev/shm and vLLM's reload ('reload'), and
# 'gather': process_allgather of a parameter other trainer processes hold parts of
# (through host memory and the network between processes).
SYNC_BYTES_PER_S = {"nccl": 100e9, "ipc": 500e9, "reload": 0.2e9, "gather": 20e9}


@dataclasses.dataclass(frozen=True)
class Rates:
  """The device's peaks and the shares of them each phase reaches."""
  peak_flops: float = 989e12  # dense bf16, H100/H200 datasheet
  hbm_bytes_per_s: float = 4.8e12  # H200 datasheet
  train_mfu: float = 0.40
  score_mfu: float = 0.40
  decode_mfu: float = 0.40
  hbm_efficiency: float = 0.70
  # `graft_jax.plan.phases`: the JAX sampler's share of the bandwidth when every decode
  # step reads the whole cache window, and vLLM's paged decode (live tokens only).
  window_hbm_efficiency: float = 0.70
  paged_hbm_efficiency: float = 0.70


def window_efficiency(seconds: float, *, rows: int, prompt_slots: int, new_slots: int,
                      steps: int, hbm_bytes_per_s: float = 4.8e12) -> float:
  """The share of the bandwidth a JAX-sampler call of Qwen3-1.7B reached, counting
  the bytes its program reads: every weight (bf16) and the whole cache window of
  every row, on each of ``steps`` decode steps."""
  mc = ModelConfig.qwen3_1p7b()
  per_step = costs.decode_bytes_per_step(mc, rows, prompt_slots + new_slots)
  return steps * per_step / hbm_bytes_per_s / seconds


# The efficiencies benchmarks/gpu_check.py measured on one H200 for Qwen3-1.7B
# (update at 8,192-token rows with full remat, scoring at 8,192, the JAX sampler
# with 256 rows of 512 + 1,024 slots running all 1,024 steps in 36.9 s):
# BENCHMARKS.md, "On an NVIDIA H200". vLLM has not run on a GPU: its share is stated.
MEASURED_H200 = Rates(train_mfu=0.30, score_mfu=0.51, decode_mfu=0.40, hbm_efficiency=0.19,
                      window_hbm_efficiency=window_efficiency(
                          36.9, rows=256, prompt_slots=512, new_slots=1024, steps=1024),
                      paged_hbm_efficiency=0.70)


@dataclasses.dataclass(frozen=True)
class Workload:
  """What one step of one model does, in tokens."""
  rows: int  # R = prompts x n
  prompt_tokens: float  # mean L_p
  response_cap: int  # L_r
  response_tokens: float  # mean r
  score_rows: int  # R': rows scored teacher-forced (old log-probs, gate, reference)
  epochs: int = 1


@dataclasses.dataclass(frozen=True)
class PhaseCost:
  flops: float
  bytes: float
  seconds: float


def sampling(cfg: ModelConfig, w: Workload, devices: int, rates: Rates, *,
             weight_bytes: int = 2, cache_bytes: int = 2) -> PhaseCost:
  """The JAX sampler's decode loop and prefill (see the module docstring)."""
  rows_dev = w.rows / devices
  r, lp = w.response_tokens, w.prompt_tokens
  kv = costs.kv_bytes_per_position(cfg, cache_bytes)
  read = (w.response_cap * weight_bytes * costs.all_params(cfg)
          + rows_dev * kv * (r * lp + r * (r + 1) / 2))
  decode_flops = rows_dev * r * costs.decode_flops_per_token(cfg, int(lp + r / 2))
  prefill_flops = rows_dev * lp * costs.score_flops_per_token(cfg, int(lp))
  seconds = (max(read / (rates.hbm_efficiency * rates.hbm_bytes_per_s),
                 decode_flops / (rates.decode_mfu * rates.peak_flops))
             + prefill_flops / (rates.score_mfu * rates.peak_flops))
  return PhaseCost(devices * (decode_flops + prefill_flops), devices * read, seconds)


def scoring(cfg: ModelConfig, w: Workload, devices: int, rates: Rates) -> PhaseCost:
  """Teacher-forced forward passes over ``w.score_rows`` rows."""
  t = w.prompt_tokens + w.response_tokens
  flops = w.score_rows * t * costs.score_flops_per_token(cfg, int(t))
  return PhaseCost(flops, 0.0, flops / (devices * rates.score_mfu * rates.peak_flops))


def update(cfg: ModelConfig, w: Workload, devices: int, rates: Rates) -> PhaseCost:
  """Forward and backward over every row, ``w.epochs`` times."""
  t = w.prompt_tokens + w.response_tokens
  flops = w.epochs * w.rows * t * costs.train_flops_per_token(cfg, int(t))
  return PhaseCost(flops, 0.0, flops / (devices * rates.train_mfu * rates.peak_flops))


def weight_sync(cfg: ModelConfig, engine: str, sync: str, rates: Rates, *, serve_bytes: int = 2,
                master_bytes: int = 4) -> PhaseCost:
  """Moving the new weights to the sampler once per step."""
  n = costs.all_params(cfg)
  if engine == "jax":  # one cast of the master weights to bf16, in HBM
    moved = n * (master_bytes + serve_bytes)
    return PhaseCost(0.0, moved, moved / (rates.hbm_efficiency * rates.hbm_bytes_per_s))
  moved = n * serve_bytes
  return PhaseCost(0.0, moved, moved / SYNC_BYTES_PER_S[sync])


def sync_choices(cfg: ModelConfig, processes: int, *, serve_bytes: int = 2) -> dict[str, float]:
  """Seconds of one push of `cfg`'s weights (tied embeddings once) from `processes` trainer
  processes, for each way to move them:

  - 'reload': the whole state dict through /dev/shm and vLLM's reload;
  - 'nccl, process 0 gathers': the (P-1)/P of the bytes other processes hold come to
    process 0 (``process_allgather``, bucket by bucket, before each broadcast), then one
    NCCL broadcast of every byte;
  - 'nccl, each process sends its shards': every byte still lands on the server's GPUs
    through its one link, so the broadcast time is the same and only the gather goes.
  """
  n = costs.all_params(cfg) * serve_bytes
  nccl = n / SYNC_BYTES_PER_S["nccl"]
  gather = n * (processes - 1) / processes / SYNC_BYTES_PER_S["gather"]
  return {"reload": n / SYNC_BYTES_PER_S["reload"], "nccl, process 0 gathers": gather + nccl,
          "nccl, each process sends its shards": nccl}


def format_sync_choices(model_cfgs: dict, processes: int, used: str) -> str:
  """One line per model: the seconds per push of each way (`sync_choices`)."""
  lines = [f"weight sync per step and model, {processes} trainer process(es) "
           f"(this run: {used}):"]
  for name, mc in model_cfgs.items():
    lines.append(f"  {name:<16}" + ", ".join(f"{k} {v:.2f} s"
                                             for k, v in sync_choices(mc, processes).items()))
  return "\n".join(lines)


def workload(train_cfg, *, mean_prompt_tokens: float, response_fill: float,
             exchange_fraction: float) -> Workload:
  """One model's step from the run config and the stated length assumptions."""
  rows = train_cfg.prompts_per_step * train_cfg.n
  scored = rows if train_cfg.old_logp_source == "teacher_forced" else 0
  if train_cfg.method == "graft":
    scored += int(exchange_fraction * train_cfg.prompts_per_step) * train_cfg.n
  if train_cfg.method == "hacpo":
    scored += rows  # the reference model's pass
  return Workload(rows=rows, prompt_tokens=min(mean_prompt_tokens, train_cfg.max_prompt_len),
                  response_cap=train_cfg.max_response_len,
                  response_tokens=response_fill * train_cfg.max_response_len,
                  score_rows=scored, epochs=train_cfg.ppo_epochs)


def step_phases(train_cfg, model_cfgs: dict, devices: int, rates: Rates, *,
                sync: str = "", **assumptions) -> dict:
  """{model name: {phase: PhaseCost}} for one step; `sync`: the weight sync the run uses
  (default: ``vllm.weight_sync``, 'auto' read as on GPUs)."""
  if not sync:
    from graft_jax.config.placement import sync_backend  # pylint: disable=import-outside-toplevel
    sync = sync_backend(train_cfg, on_gpu=True)
  w = workload(train_cfg, **assumptions)
  out = {}
  for name, mc in model_cfgs.items():
    out[name] = {"sampling": sampling(mc, w, devices, rates),
                 "scoring": scoring(mc, w, devices, rates),
                 "update": update(mc, w, devices, rates),
                 "weight sync": weight_sync(mc, train_cfg.engine, sync, rates)}
  return out


def step_seconds(phases: dict) -> float:
  return sum(p.seconds for per_model in phases.values() for p in per_model.values())


def run_steps(train_cfg, train_prompts: int) -> int:
  """The run's steps: ``total_steps``, else epochs x the train prompts' full steps."""
  return train_cfg.total_steps or train_cfg.epochs * (train_prompts // train_cfg.prompts_per_step)


def format_phases(phases_by_rates: dict, steps: int, devices: int) -> str:
  """Per model and phase: FLOPs, HBM bytes and seconds under each set of rates, then
  the step and the run (``steps`` steps on ``devices`` devices) under each."""
  names = list(phases_by_rates)
  first = phases_by_rates[names[0]]
  lines = [f"{'model':<16}{'phase':<13}{'TFLOP':>10}{'GB moved':>10}"
           + "".join(f"{'s @ ' + n:>22}" for n in names)]
  for model, per_phase in first.items():
    for phase, cost in per_phase.items():
      secs = "".join(f"{phases_by_rates[n][model][phase].seconds:>22.1f}" for n in names)
      lines.append(f"{model:<16}{phase:<13}{cost.flops / 1e12:>10.0f}{cost.bytes / 1e9:>10.1f}"
                   + secs)
  for n in names:
    step = step_seconds(phases_by_rates[n])
    lines.append(f"step @ {n}: {step:.0f} s; the run's {steps} steps: "
                 f"{step * steps / 3600:.1f} h, {step * steps * devices / 3600:.0f} GPU-hours "
                 f"on {devices} devices")
  return "\n".join(lines)
