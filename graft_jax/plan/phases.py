"""Every phase of a run, per engine: the seconds of a step and the GPU-hours of the run.

The phases are the ones the trainer records in each metrics row (``time/...``,
`PHASE_TIMINGS`), each modelled as the code runs it:

- sampling: `graft_jax.plan.sampling_plan` (the JAX sampler's calls and window, or a
  vLLM server's continuous batching); the JAX models take turns on the devices,
  vLLM servers sample side by side (``rollout.concurrent``);
- rewards: decoding the responses and the verifier, on ``reward.num_workers`` CPUs;
- exchange: GRAFT's gate scores the offered peer rows (``exchange_fraction`` of the
  prompts x n), re-tokenized, packed whole into rows of the run's length budget,
  calls of one shape (`score_rows`, `graft_jax.packing.sequence_packing`); HACPO's
  reference pass;
- scoring: the teacher-forced old log-probs of the rows with a signal outside the
  first minibatch (whose come from the update's forward), packed the same way;
- update: the rows with a signal, sequences packed whole into rows
  (``perf.packed_update``, `packed_micro_batches.plan`) or in length buckets
  (`length_packing.plan_micro_batches`), the optimizer step per minibatch, and (vLLM)
  each server's weight push;
- compilation once per run (programs x seconds per program; vLLM: its servers' start),
  validation at ``eval.every_steps`` (calls of 64 problems x k, each waiting for its
  longest row; with the JAX slot pool, ``rollout.sampler='pool'``, one call of the whole
  suite; the models in turn, or side by side where they sample so) and checkpoint
  writes at a stated rate.

FLOPs, bytes and rates are `graft_jax.plan.costs` and `step_time.Rates`. Packed rows
(scoring, exchange, the packed update) are charged what their attention kernel
computes on the planned GPU (`packed_kernel`, `costs.packed_row_flops`): cuDNN's
packed layout each sequence's triangle, the Pallas kernel the whole row's causal
tiles at its share of cuDNN's rate.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import numpy as np

from graft_jax import backends
from graft_jax.models.attention import resolve_impl
from graft_jax.models.logprobs import bucket_length
from graft_jax.models.packed_attention import MAX_SEGMENTS
from graft_jax.plan import costs, sampling_plan, server_layout, step_time
from graft_jax.plan.lengths import ResponseLengths
from graft_jax.packing import length_packing, sequence_packing
from graft_jax.train import methods, packed_micro_batches

# The plan's phases and the ``time/...`` metrics the trainer records for each
# (``{m}``: each model's name). The weight push happens inside the update (vLLM) or the
# sampler's call (the JAX sampler's cast), so it is a part of those.
PHASE_TIMINGS = {"sampling": ("{m}/sample_s",), "rewards": ("{m}/reward_s",),
                 "exchange": ("peers_s", "exchange_s"), "scoring": ("{m}/old_logp_s",),
                 "update": ("{m}/update_s",), "compile": ("compile_s",),
                 "validation": ("eval_s",), "checkpoint": ("checkpoint_s",)}
STEP_PHASES = ("sampling", "rewards", "exchange", "scoring", "update")
RUN_PHASES = ("compile", "validation", "checkpoint")
# Problems of the paper's validation benchmarks (eval.suite names).
EVAL_SIZES = {"math500": 500, "aime24": 30, "aime25": 30, "amc23": 40, "minerva": 272}
PAPER_GPU_HOURS = 40.9  # GRAFT on SmolLM3-3B / Qwen3-1.7B, 4 x H200
VALIDATION_BATCH = 64  # problems per engine call (`Validator.batch_size`)


@dataclasses.dataclass(frozen=True)
class Assumptions:
  """What the config does not say: stated figures (docs/plan.md)."""
  lengths: ResponseLengths
  prompt_mean: float = 256.0
  prompt_longest: int = 400  # of a call: its prompt bucket
  exchange_fraction: float = 0.25  # GRAFT: prompts whose peer rows the gate scores
  signal_fraction: float = 0.6  # rows in groups with mixed rewards (the rest are skipped)
  reward_items_per_cpu_s: float = 705.0  # BENCHMARKS.md, rewards, the math mix
  tokenizer_tokens_per_s: float = 1e6  # decode / re-encode on one CPU
  compile_s_per_program: float = 40.0  # the H200 sampler call's (BENCHMARKS.md)
  disk_bytes_per_s: float = 1e9
  host_copy_bytes_per_s: float = 20e9  # device -> host, what an asynchronous save waits on
  device_bytes: float = 141e9
  vllm_max_num_seqs: int = 256
  vllm_overhead_bytes: float = 6e9  # activations, CUDA graphs, the allocator
  vllm_start_s: float = 60.0
  # A vLLM server's host time outside the GPU's step (its scheduler; a token's HTTP and
  # log-prob JSON), and two servers sharing a GPU: their sampling's sum times this
  # (1: additive). Stated, with their ranges (`graft_jax.plan.inputs`).
  vllm_host_s_per_step: float = 0.0
  vllm_host_s_per_token: float = 0.0
  shared_gpu_factor: float = 1.0


@dataclasses.dataclass(frozen=True)
class Term:
  seconds: float
  detail: str = ""


@dataclasses.dataclass
class EnginePlan:
  """{phase: {model: Term}} of one step, and the run's once-per-run terms."""
  engine: str
  devices: int
  steps: int
  step_terms: dict
  run_terms: dict  # phase -> Term over the whole run
  parallel_sampling: bool
  shared_factor: float = 1.0  # servers sharing GPUs: their sampling's sum times this

  def phase_seconds(self, phase: str) -> float:
    per_model = [t.seconds for t in self.step_terms[phase].values()]
    if phase == "sampling" and self.parallel_sampling:
      return max(per_model, default=0.0)
    return sum(per_model) * (self.shared_factor if phase == "sampling" else 1.0)

  @property
  def step_seconds(self) -> float:
    return sum(self.phase_seconds(p) for p in STEP_PHASES)

  def run_seconds(self, validation: bool = True) -> float:
    extra = sum(t.seconds for p, t in self.run_terms.items() if validation or p != "validation")
    return self.steps * self.step_seconds + extra

  def gpu_hours(self, validation: bool = True) -> float:
    return self.run_seconds(validation) * self.devices / 3600


def packed_kernel(cfg, mc, rates) -> str:
  """The kernel packed rows attend with on the planned GPU (`costs.attention_pairs`):
  'row' where the run's attention is not cuDNN's ('blocked' walks the whole row)."""
  impl = resolve_impl(cfg.perf.attention_impl, dtype=cfg.dtype, head_dim=mc.head_dim,
                      length=cfg.max_prompt_len + cfg.max_response_len,
                      block=cfg.perf.attention_block, backend="gpu")
  if impl != "cudnn":
    return "row"
  return backends.packed_attention_kernel(cfg.dtype, mc.head_dim,
                                          capability=rates.compute_capability)


def packed_call_flops(mc, lengths, bins, rows: int, length: int, kernel: str, rates, *,
                      passes: int) -> float:
  """FLOPs of one call of ``rows`` packed rows of ``length`` (``bins``: each row's
  indices into ``lengths``; rows past them are empty), the Pallas kernel's attention
  FLOPs divided by its share of cuDNN's rate. A call with a row of more than
  `MAX_SEGMENTS` sequences runs the Pallas kernel (`packed_gpu_attention`)."""
  if kernel == "cudnn_packed" and any(len(b) > MAX_SEGMENTS for b in bins):
    kernel = "pallas"
  weight = 1.0 / rates.pallas_attention_share if kernel == "pallas" else 1.0
  total = 0.0
  for r in range(rows):
    segments = [lengths[i] for i in bins[r]] if r < len(bins) else []
    matmul, attention = costs.packed_row_flops(mc, segments, length, kernel, passes=passes)
    total += matmul + weight * attention
  return total


def _score_chunks(mc, row_tokens, *, cap_total: int, budget: int, devices: int,
                  min_length: int = 0, kernel: str = "row", rates=None) -> tuple[float, set]:
  """FLOPs of `score_rows` over rows of ``row_tokens`` tokens, packed whole into rows
  (`sequence_packing.plan_calls`), by ``kernel`` (`packed_call_flops`), and its
  (rows, length) shapes."""
  if not len(row_tokens):
    return 0.0, set()
  row_length = sequence_packing.packed_row_length(
      cap_total or max(int(np.max(row_tokens)), min_length))
  most = max(1, 64 // devices)
  rows = min(sequence_packing.rows_per_call(budget, row_length, most), most) * devices
  flops, shapes = 0.0, set()
  for bins, length in sequence_packing.plan_calls(row_tokens, row_length, rows):
    flops += packed_call_flops(mc, row_tokens, bins, rows, length, kernel, rates, passes=1)
    shapes.add((rows, length))
  return flops, shapes


def _update_flops(mc, row_tokens, cfg, devices: int, kernel: str = "row",
                  rates=None) -> tuple[float, int]:
  """FLOPs of the update over ``row_tokens`` (one epoch's minibatches), sequences packed
  whole into rows (``perf.packed_update``, their attention by ``kernel``,
  `packed_call_flops`) or rows in length buckets, and its computed tokens."""
  cap_total = cfg.max_prompt_len + cfg.max_response_len
  width = bucket_length(cap_total, cap_total)
  per_mb = -(-len(row_tokens) // cfg.num_minibatches)
  flops, padded = 0.0, 0
  for start in range(0, len(row_tokens), per_mb):
    mb = row_tokens[start:start + per_mb]
    if cfg.perf.packed_update:  # whole sequences packed into rows of `width`
      shapes, bins_M = packed_micro_batches.plan(np.asarray(mb, np.int64), width,
                                                 cfg.perf.micro_batch_tokens, devices,
                                                 num_rows=len(mb))
      for (_, rows, length), bins in zip(shapes, bins_M):
        flops += packed_call_flops(mc, mb, bins, rows, length, kernel, rates, passes=3)
        padded += rows * length
      continue
    shapes = length_packing.plan_micro_batches(mb, width, cfg.perf.micro_batch_tokens, devices)
    for _, rows, length in shapes:
      flops += rows * length * costs.train_flops_per_token(mc, length)
      padded += rows * length
  return cfg.ppo_epochs * flops, cfg.ppo_epochs * padded


def eval_calls(cfg, *, pool: bool = False) -> list[int]:
  """Problems per validation call (`Validator`: each benchmark in calls of 64; the
  slot pool, ``pool``: the whole suite in one call)."""
  sizes = []
  for name in cfg.eval.suite:
    if name == "synthetic":
      size = (cfg.eval.max_examples or 64) * len(cfg.data.synthetic.families)
    elif name in EVAL_SIZES:
      size = EVAL_SIZES[name]
    else:
      path = next((p for p in (pathlib.Path(cfg.eval.data_dir, name + ".jsonl"),) if p.is_file()),
                  None)
      if path is None:
        raise ValueError(f"eval.suite names {name!r}: no size known and no "
                         f"{name}.jsonl in eval.data_dir {cfg.eval.data_dir!r}")
      size = sum(1 for line in path.open() if line.strip())
    if cfg.eval.max_examples and name != "synthetic":
      size = min(size, cfg.eval.max_examples)
    sizes += [min(VALIDATION_BATCH, size - s) for s in range(0, size, VALIDATION_BATCH)]
  return [sum(sizes)] if pool and sizes else sizes


def validations(cfg, steps: int) -> int:
  """How many times `Validator.due` is true in a run of ``steps`` steps."""
  every = cfg.eval.every_steps
  return 0 if not every else steps // every + (1 if steps % every else 0)


def _generate(cfg, engine, mc, a, rates, devices, layout, live, prompts, k, seed, top_p):
  """One ``generate`` of ``prompts`` x ``k`` by ``engine`` (`sampling_plan`); vLLM's
  replicas each take their part of the prompts, side by side."""
  r, top = cfg.rollout, top_p < 1
  if engine == "jax" and r.sampler == "pool":
    return sampling_plan.pool_generate(
        mc, a.lengths, prompts=prompts, n=k, prompt_longest=a.prompt_longest, slots=r.pool_slots,
        rates=rates, prefill_chunk=r.pool_prefill_chunk, prefill_group=r.pool_prefill_group,
        seed=seed, live=live, refill_at=r.pool_refill_at, devices=devices, top_p=top)
  if engine == "jax":
    return sampling_plan.jax_generate(mc, a.lengths, prompts=prompts, n=k,
                                      prompt_longest=a.prompt_longest,
                                      budget=cfg.perf.sampler_max_kv_bytes, devices=devices,
                                      rates=rates, top_p=top)
  prompts = -(-prompts // layout.replicas)
  slots = sampling_plan.vllm_slots(
      mc, a.lengths, n=k, prompt_mean=a.prompt_mean,
      share_bytes=layout.share_bytes(a.device_bytes), max_num_seqs=a.vllm_max_num_seqs,
      requests_in_flight=cfg.vllm.max_concurrency or prompts,  # 0: all of the call's
      overhead_bytes=a.vllm_overhead_bytes)
  return sampling_plan.vllm_generate(mc, a.lengths, prompts=prompts, n=k,
                                     prompt_mean=a.prompt_mean, slots=slots, rates=rates,
                                     seed=seed, top_p=top, host_s_per_step=a.vllm_host_s_per_step,
                                     host_s_per_token=a.vllm_host_s_per_token)


def plan_engine(cfg, models: dict, engine: str, devices: int, rates, a: Assumptions,
                steps: int, *, sync: str = "nccl", layout=None,
                live_decode: bool = True) -> EnginePlan:
  """The plan of ``cfg`` with ``engine`` ('jax' or 'vllm') for ``models`` ({name:
  ModelConfig}) on ``devices`` trainer devices, ``steps`` steps; vLLM's servers placed as
  ``layout`` (`server_layout`; None: as ``cfg`` places them). ``live_decode``: whether
  the slot pool decodes with the live-span kernel (its choice on GPUs and TPUs), or with
  XLA's whole-window attention (a check on a CPU compares that)."""
  layout = layout or server_layout.from_config(cfg)
  a = dataclasses.replace(a, prompt_mean=min(a.prompt_mean, cfg.max_prompt_len),
                          prompt_longest=min(a.prompt_longest, cfg.max_prompt_len))
  p, n, lengths = cfg.prompts_per_step, cfg.n, a.lengths
  cap_total = cfg.max_prompt_len + cfg.max_response_len
  rows = p * n
  budget = cfg.perf.micro_batch_tokens
  tokens_R = np.minimum(a.prompt_mean + lengths.sample(rows), cap_total)
  terms = {phase: {} for phase in STEP_PHASES}
  programs, validation_by_model, state_bytes = 0, {}, 0.0
  flops_s = lambda f, mfu: f / (devices * mfu * rates.peak_flops)
  pool = engine == "jax" and cfg.rollout.sampler == "pool"
  generate = lambda mc, prompts, k, seed=0, top_p=1.0: _generate(
      cfg, engine, mc, a, rates, devices, layout, live_decode, prompts, k, seed, top_p)

  verify = lambda items: (items / (cfg.reward.num_workers * a.reward_items_per_cpu_s)
                          + items * lengths.expected() / a.tokenizer_tokens_per_s)
  for name, mc in models.items():
    kernel = packed_kernel(cfg, mc, rates)
    g = generate(mc, p, n, top_p=cfg.rollout.top_p)
    terms["sampling"][name] = Term(g.seconds, g.describe())
    terms["rewards"][name] = Term(verify(rows), f"{rows} responses")
    signal = tokens_R[:int(round(a.signal_fraction * rows))]
    if cfg.old_logp_source == "teacher_forced":
      first = len(signal) // cfg.num_minibatches if cfg.ppo_epochs == 1 else 0
      f, shapes = _score_chunks(mc, signal[first:], cap_total=cap_total, budget=budget,
                                devices=devices, min_length=int(np.max(tokens_R)),
                                kernel=kernel, rates=rates)
    else:
      f, shapes = 0.0, set()
    terms["scoring"][name] = Term(flops_s(f, rates.score_mfu),
                                  f"{len(signal) - (first if f else 0)} rows, "
                                  f"{', '.join(f'{r} x {t}' for r, t in sorted(shapes)) or '-'}")
    exchange_f, ex_shapes, picks = 0.0, set(), 0
    peer_scoring = methods.lookup(cfg.method).peer_scoring
    if peer_scoring == "picked":
      picks = int(round(a.exchange_fraction * p * n))
      exchange_f, ex_shapes = _score_chunks(mc, tokens_R[:picks], cap_total=cap_total,
                                            budget=budget, devices=devices, kernel=kernel,
                                            rates=rates)
    elif peer_scoring == "all":
      exchange_f, ex_shapes = _score_chunks(mc, tokens_R, cap_total=cap_total, budget=budget,
                                            devices=devices, kernel=kernel, rates=rates)
    host = 2 * picks * lengths.expected() / a.tokenizer_tokens_per_s  # decode + re-encode
    terms["exchange"][name] = Term(flops_s(exchange_f, rates.score_mfu) + host,
                                   f"{picks} peer rows scored" if picks else "")
    up_f, padded = _update_flops(mc, signal, cfg, devices, kernel, rates)
    opt = cfg.num_minibatches * cfg.ppo_epochs * costs.all_params(mc) * 28 / devices / (
        rates.hbm_efficiency * rates.hbm_bytes_per_s)  # fp32 params, grads, 2 moments
    push = (layout.replicas * step_time.weight_sync(mc, "vllm", sync, rates).seconds
            if engine == "vllm" else 0.0)
    terms["update"][name] = Term(flops_s(up_f, rates.train_mfu) + opt + push,
                                 f"{len(signal)} rows, {padded / max(np.sum(signal), 1):.2f}x "
                                 f"padded" + (f", attention {kernel}" if cfg.perf.packed_update
                                              else "") + (f", push {push:.2f} s" if push else ""))
    # Programs: the update's shapes + its optimizer step, the scorer's, the sampler's.
    width = bucket_length(cap_total, cap_total)
    per_mb = -(-len(signal) // cfg.num_minibatches)
    programs += 1 + len(
        packed_micro_batches.run_shapes(per_mb, width, width, budget, devices)
        if cfg.perf.packed_update else length_packing.run_shapes(per_mb, width, budget, devices))
    programs += len(shapes | ex_shapes)
    calls = eval_calls(cfg, pool=pool) if cfg.eval.every_steps else []
    if pool:  # compiled for a step's requests; a larger validation call raises it once
      programs += 1 + any(c * cfg.eval.k > p * n for c in calls)
    elif engine == "jax":
      sampler_shapes = {g.chunk} | {generate(mc, c, cfg.eval.k).chunk for c in set(calls)}
      programs += len(sampler_shapes)
    validation_by_model[name] = sum(generate(mc, c, cfg.eval.k, i, cfg.eval.top_p).seconds
                                    + verify(c * cfg.eval.k) for i, c in enumerate(calls))
    state_bytes += costs.all_params(mc) * (np.dtype(cfg.param_dtype).itemsize + 8)
  compile_s = programs * a.compile_s_per_program
  compile_detail = f"{programs} programs x {a.compile_s_per_program:.0f} s"
  if engine == "vllm":
    compile_s += a.vllm_start_s
    compile_detail += f" + servers' start {a.vllm_start_s:.0f} s"
  ck = cfg.checkpoint
  writes = (steps // ck.every_steps if ck.every_steps else 0) + (
      1 if not ck.every_steps or steps % ck.every_steps else 0)
  rate = a.host_copy_bytes_per_s if ck.async_save else a.disk_bytes_per_s
  per_write = state_bytes / rate
  v = validations(cfg, steps)
  # Servers that share GPUs share their HBM: their sampling adds up. Validation samples
  # side by side where the rollouts do (`Validator`).
  parallel = (engine == "vllm" and cfg.rollout.concurrent != "off" and len(models) > 1
              and not layout.shared)
  per_model = list(validation_by_model.values())
  shared = a.shared_gpu_factor if engine == "vllm" and layout.shared else 1.0
  validation_s = max(per_model, default=0.0) if parallel else shared * sum(per_model)
  run_terms = {
      "compile": Term(compile_s, compile_detail),
      "validation": Term(v * validation_s, f"{v} x {validation_s:.0f} s "
                                           f"({len(eval_calls(cfg, pool=pool)) if v else 0} "
                                           f"calls per model"
                                           f"{', side by side' if parallel else ''})"),
      "checkpoint": Term(writes * per_write,
                         f"{writes} x {state_bytes / 1e9:.0f} GB at {rate / 1e9:.0f} GB/s "
                         f"({'device -> host, the write overlaps' if ck.async_save else 'disk'})")}
  return EnginePlan(engine, devices, steps, terms, run_terms, parallel, shared)


def format_plan(plan: EnginePlan, models) -> str:
  """Every term of one engine's plan, the step, and the run's GPU-hours with and without
  validation, the paper's beside them."""
  names = list(models)
  lines = [f"engine {plan.engine}: {plan.devices} GPUs, {plan.steps} steps"
           + (" (the servers sample side by side)" if plan.parallel_sampling else ""),
           f"  {'phase':<12}" + "".join(f"{n:>14}" for n in names) + f"{'step':>10}  detail"]
  for phase in STEP_PHASES:
    per = plan.step_terms[phase]
    detail = "; ".join(f"{n}: {per[n].detail}" for n in names if per[n].detail)
    lines.append(f"  {phase:<12}" + "".join(f"{per[n].seconds:>12.1f} s" for n in names)
                 + f"{plan.phase_seconds(phase):>8.1f} s  {detail}")
  lines.append(f"  step: {plan.step_seconds:.0f} s")
  for phase, term in plan.run_terms.items():
    lines.append(f"  {phase:<12} per run {term.seconds / 3600:6.2f} h   {term.detail}")
  lines.append(f"  run: {plan.gpu_hours(False):.0f} GPU-hours without validation, "
               f"{plan.gpu_hours(True):.0f} with (the paper, GRAFT on pair 1: "
               f"{PAPER_GPU_HOURS} GPU-hours)")
  return "\n".join(lines)


def recorded_phases(time_metrics: dict, model_names) -> set:
  """The plan's phases whose ``time/...`` keys appear in a metrics row's ``time``."""
  keys = set(time_metrics)
  return {phase for phase, pats in PHASE_TIMINGS.items()
          if any(pat.format(m=m) in keys for pat in pats for m in model_names)}


def ratio_table(measured: dict, predicted: dict) -> list[tuple[str, float, float, float]]:
  """(phase, measured s, predicted s, measured / predicted) for the phases in both."""
  return [(k, measured[k], predicted[k], measured[k] / predicted[k] if predicted[k] else math.inf)
          for k in predicted if k in measured]
