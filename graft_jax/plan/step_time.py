"""The rates a plan reads (device peaks and the shares of them each phase reaches), the
weight sync's seconds per push, and a run's step count.

The plan of every phase per engine is `graft_jax.plan.phases`; this module gives it
`Rates`, the efficiencies ``benchmarks/gpu_check.py`` measured on one H200
(`MEASURED_H200`; the ones no GPU has measured, with their ranges, are
`graft_jax.plan.inputs`), and the weight sync: none for the JAX sampler beyond the cast of
the master weights to bf16 (one pass over them in HBM), else the serving dtype's
bytes over the link ``vllm.weight_sync`` uses.
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
  # The GPU's CUDA compute capability (H100 / H200: 9.0), which picks the kernel of
  # packed rows (`graft_jax.backends.packed_attention_kernel`), and the Pallas GPU
  # kernel's rate on the FLOPs it computes as a share of cuDNN's: stated, not
  # measured (it has not run on a GPU here).
  compute_capability: str = "9.0"
  pallas_attention_share: float = 0.5
  # The slot pool's live-span decode kernel (each row's live blocks), the weight push's
  # links (`SYNC_BYTES_PER_S`), and the vocabulary-wide reads of a logits row per token
  # that top-p sampling makes (its top-k and log-sum-exp): stated (`graft_jax.plan.inputs`).
  live_hbm_efficiency: float = 0.70
  nccl_bytes_per_s: float = SYNC_BYTES_PER_S["nccl"]
  ipc_bytes_per_s: float = SYNC_BYTES_PER_S["ipc"]
  top_p_vocab_reads: float = 2.0


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
# with 256 rows of 512 + 1,024 slots running all 1,024 steps, its time below):
# BENCHMARKS.md, "On an NVIDIA H200". vLLM has not run on a GPU: its share is stated.
# The pool's live-span kernel is taken at the same share (stated: it has not run there).
_WINDOW_H200 = window_efficiency(36.9, rows=256, prompt_slots=512, new_slots=1024, steps=1024)
MEASURED_H200 = Rates(train_mfu=0.30, score_mfu=0.51, decode_mfu=0.40, hbm_efficiency=0.19,
                      window_hbm_efficiency=_WINDOW_H200, live_hbm_efficiency=_WINDOW_H200,
                      paged_hbm_efficiency=0.70)



@dataclasses.dataclass(frozen=True)
class PhaseCost:
  flops: float
  bytes: float
  seconds: float





def weight_sync(cfg: ModelConfig, engine: str, sync: str, rates: Rates, *, serve_bytes: int = 2,
                master_bytes: int = 4) -> PhaseCost:
  """Moving the new weights to the sampler once per step."""
  n = costs.all_params(cfg)
  if engine == "jax":  # one cast of the master weights to bf16, in HBM
    moved = n * (master_bytes + serve_bytes)
    return PhaseCost(0.0, moved, moved / (rates.hbm_efficiency * rates.hbm_bytes_per_s))
  moved = n * serve_bytes
  link = {"nccl": rates.nccl_bytes_per_s, "ipc": rates.ipc_bytes_per_s}
  return PhaseCost(0.0, moved, moved / (link[sync] if sync in link else SYNC_BYTES_PER_S[sync]))


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





def run_steps(train_cfg, train_prompts: int) -> int:
  """The run's steps: ``total_steps``, else epochs x the train prompts' full steps."""
  return train_cfg.total_steps or train_cfg.epochs * (train_prompts // train_cfg.prompts_per_step)
