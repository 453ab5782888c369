"""The plan's efficiencies and stated costs, each with its source and the range it may
take: measured ones are points, the ones no GPU has measured here have a low and a high.

An input's ``name`` is a field of `step_time.Rates` or of `phases.Assumptions`; its
``point`` is the value those carry by default (`step_time.MEASURED_H200`,
``Assumptions()``), so the plan's point figures are today's. `graft_jax.plan.ranges`
moves each stated input to its ends and reports what the step and the run take there.
"""

from __future__ import annotations

import dataclasses

from graft_jax.plan import phases, step_time

_H200 = "benchmarks/gpu_check.py on one H200 (BENCHMARKS.md, 'On an NVIDIA H200')"


@dataclasses.dataclass(frozen=True)
class Input:
  """One input: its value in the plan, its range, and where the figures come from."""
  name: str
  point: float
  low: float
  high: float
  source: str

  @property
  def measured(self) -> bool:
    return self.low == self.point == self.high


def _measured(name: str, point: float, source: str = _H200) -> Input:
  return Input(name, point, point, point, "measured: " + source)


INPUTS = (
    _measured("train_mfu", 0.30, _H200 + ", the update of Qwen3-1.7B at 8,192-token rows"),
    _measured("score_mfu", 0.51, _H200 + ", teacher-forced scoring at 8,192 tokens"),
    _measured("hbm_efficiency", 0.19, _H200 + ", the sampler call's tokens/s against its "
              "HBM-bound rate; the plan's other passes over memory take it too"),
    _measured("window_hbm_efficiency", step_time.MEASURED_H200.window_hbm_efficiency,
              _H200 + ", a static-sampler call of 256 rows over 1,536 slots"),
    _measured("reward_items_per_cpu_s", 705.0, "BENCHMARKS.md, rewards, the math mix"),
    _measured("compile_s_per_program", 40.0, _H200 + ", the sampler call's compilation"),
    Input("paged_hbm_efficiency", 0.70, 0.45, 0.80,
          "stated: vLLM's paged decode has not run on a GPU here; 0.70 is the usual share "
          "of large-batch decode; a server with a quarter of a GPU runs smaller batches"),
    Input("live_hbm_efficiency", step_time.MEASURED_H200.window_hbm_efficiency, 0.15, 0.55,
          "stated: the pool's live-span kernel has not run on a GPU; the point is the static "
          "sampler's measured window share; low: its block gathers at half that; high: a "
          "paged kernel's"),
    Input("decode_mfu", 0.40, 0.25, 0.55,
          "stated: decode is bound by its reads; the compute share binds only wide rows"),
    Input("pallas_attention_share", 0.5, 0.3, 0.8,
          "stated: the Pallas GPU kernel (before Hopper) against cuDNN, never run on a GPU"),
    Input("nccl_bytes_per_s", step_time.SYNC_BYTES_PER_S["nccl"], 25e9, 200e9,
          "stated: NVLink's nominal rate for the push; low: bucket latency and one sender's "
          "links shared by three peers; high: a tuned broadcast"),
    Input("ipc_bytes_per_s", step_time.SYNC_BYTES_PER_S["ipc"], 100e9, 1000e9,
          "stated: a CUDA IPC copy on one GPU, a share of its HBM bandwidth"),
    Input("top_p_vocab_reads", 2.0, 2.0, 6.0,
          "stated: top-p's log-sum-exp and top-k of 256 each read a row's fp32 logits once; "
          "a GPU top-k over 151,936 entries may take several passes"),
    Input("vllm_host_s_per_step", 0.0, 0.0, 3e-3,
          "stated: vLLM's scheduler and input preparation per step, taken as hidden behind "
          "the GPU's step; high: 3 ms a step not hidden"),
    Input("vllm_host_s_per_token", 0.0, 0.0, 10e-6,
          "stated: each token's HTTP response and log-prob JSON, taken as overlapped; high: "
          "10 us a token on the path"),
    Input("shared_gpu_factor", 1.0, 0.9, 1.25,
          "stated: two servers on one GPU add up; low: one's host gaps filled by the other; "
          "high: time-slicing's context switches and a shared L2"),
    Input("vllm_overhead_bytes", 6e9, 4e9, 10e9,
          "stated: a server's activations, CUDA graphs and allocator outside its KV cache"),
    Input("vllm_start_s", 60.0, 30.0, 180.0, "stated: a server's start, weights loaded"),
    Input("tokenizer_tokens_per_s", 1e6, 0.3e6, 3e6,
          "stated: decoding and re-encoding tokens on one CPU"),
    Input("host_copy_bytes_per_s", 20e9, 5e9, 25e9,
          "stated: device to host, what an asynchronous checkpoint waits on"),
)


def by_name() -> dict[str, Input]:
  return {i.name: i for i in INPUTS}


def with_values(rates: step_time.Rates, a: phases.Assumptions,
                values: dict[str, float]) -> tuple[step_time.Rates, phases.Assumptions]:
  """``rates`` and ``a`` with each named input set to its value."""
  fields = lambda obj: {f.name for f in dataclasses.fields(obj)}
  unknown = set(values) - fields(rates) - fields(a)
  if unknown:
    raise KeyError(f"not an input of Rates or Assumptions: {sorted(unknown)}")
  rates = dataclasses.replace(rates, **{k: v for k, v in values.items() if k in fields(rates)})
  a = dataclasses.replace(a, **{k: v for k, v in values.items() if k in fields(a)})
  return rates, a
