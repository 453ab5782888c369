"""Seconds of one ``generate`` of P prompts x n rows, per engine, as each engine runs it.

The JAX sampler (`graft_jax.rollout.jax_engine`, `sampler`): the prompts decode in
``calls`` calls of ``chunk`` prompts (`kv_budget.call_plan` under
``perf.sampler_max_kv_bytes``, rows split over the devices), one after the other.
A call runs until its longest row stops, E[max of chunk x n lengths] steps, and
every step reads every weight (bf16, whole on each device) and the whole cache
window, prompt bucket + new-token bucket slots, of each of its rows:

.. math::
    t = \\text{calls}\\,\\Big(E[\\max]\\; \\max\\big(\\tfrac{2N_{all} + b\\,S\\,\\mathrm{kv}}
        {\\eta_{win}\\beta},\\; \\tfrac{b\\,F_{decode}(S)}{\\mu_{dec}\\Phi}\\big)
        + t_{prefill}\\Big) + t_{cast}

with b the rows per device and S the window.

The JAX slot pool (`graft_jax.rollout.continuous`): one call, its
rows entering the pool's C slots as others leave (the schedule's makespan),
each step reading every weight and, on XLA's decode attention, the whole window
of every slot; its refills prefilled in passes of up to G prompts. A device of
the D refills once R of its C / D slots are free (``rollout.pool_refill_at``,
0: R = G), or once the queue fits the free slots, so while the queue lasts
about (R - 1) / 2 of each device's slots idle, and the N rows past the first
fill enter in refills of R (`pool_generate`):

.. math::
    \\text{steps} = \\mathrm{makespan}\\big(\\ell_{1..N},\\; C - D\\,(R - 1)/2\\big),\\qquad
    \\text{passes} = \\Big(\\big\\lceil \\tfrac{\\min(C/D,\\, N/D)}{G} \\big\\rceil
        + \\big\\lceil \\tfrac{N - C}{R} \\big\\rceil \\big\\lceil \\tfrac{R}{G} \\big\\rceil\\Big)
        \\tfrac{W}{\\text{chunk}}

(the first fill on every device at once; a later refill is one device's, and
stalls the others' step, so they are counted one after the other).

Top-p sampling (validation's, or ``rollout.top_p`` < 1), every engine: a
top-k of 256 candidates and a log-sum-exp over each row's logits at every
decode step, ``top_p_vocab_reads`` fp32 reads of the vocabulary per row-token
at the measured elementwise share of the bandwidth (`top_p_seconds`).

vLLM (one server per model on its own GPU): continuous batching of the rows over
C slots (its ``max_num_seqs``, the requests in flight x n, and the sequences its
KV cache holds at the mean context), a row entering as another leaves. The
steps are the schedule's makespan; each reads the weights once and the live
tokens of its rows (paged attention reads no padding):

.. math::
    t = \\max\\Big(\\frac{\\text{steps}\\cdot 2N_{all} + \\mathrm{kv}\\sum_{rows}
        (\\ell L_p + \\ell(\\ell-1)/2)}{\\eta_{paged}\\beta},\\;
        \\frac{\\sum_{rows} \\ell\\, F_{decode}(L_p + \\ell/2)}{\\mu_{dec}\\Phi}\\Big)
        + t_{prefill} + \\text{steps}\\; t_{host} + \\textstyle\\sum_{rows} \\ell\\; t_{token}

with t_host a step's scheduler time and t_token a token's HTTP / log-prob JSON
time, both outside the GPU's step (stated ranges, `graft_jax.plan.inputs`).
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from graft_jax.plan import costs
from graft_jax.rollout.kv_budget import bucket, call_plan, kv_bytes_per_prompt, pool_prompt_width

SERVE_BYTES = 2  # bf16 weights and KV cache in both engines


@dataclasses.dataclass(frozen=True)
class Generate:
  """One ``generate``'s seconds and what they come from."""
  seconds: float
  calls: int  # JAX: compiled calls one after the other; vLLM: 1
  rows_per_call: int  # JAX: rows of a call; vLLM: concurrent slots
  steps_per_call: float  # decode steps of a call (its longest row), or the makespan
  window: int  # JAX: cache slots every step reads; vLLM: 0 (live tokens)
  chunk: int = 0  # JAX: prompts per call (the compiled shape)

  def describe(self) -> str:
    if self.window:
      return (f"{self.calls} call(s) x {self.rows_per_call} rows x {self.steps_per_call:.0f} "
              f"steps over {self.window} slots")
    return f"{self.rows_per_call} slots, {self.steps_per_call:.0f} steps"


def top_p_seconds(mc, row_tokens: float, rates) -> float:
  """Seconds of top-p's reads over ``row_tokens`` row-steps: the logits row (fp32) read
  ``rates.top_p_vocab_reads`` times each (`graft_jax.rollout.sampling.filter_top_p`)."""
  read = row_tokens * mc.vocab_size * 4 * rates.top_p_vocab_reads
  return read / (rates.hbm_efficiency * rates.hbm_bytes_per_s)


def jax_generate(mc, lengths, *, prompts: int, n: int, prompt_longest: int, budget: int,
                 devices: int, rates, top_p: bool = False) -> Generate:
  """The JAX sampler's ``generate`` of ``prompts`` prompts x ``n`` (see the module)."""
  window = bucket(prompt_longest, 16) + bucket(lengths.cap, 16)
  l_bucket = bucket(prompt_longest, 16)
  per_prompt = kv_bytes_per_prompt(mc, n=n, slots=window, itemsize=SERVE_BYTES)
  _, chunk = call_plan(prompts, per_prompt, budget, row_shards=devices)
  calls = -(-prompts // chunk)
  rows_dev = chunk * n / devices
  steps = min(lengths.expected_max(chunk * n), lengths.cap)
  read = (SERVE_BYTES * costs.all_params(mc)
          + rows_dev * window * costs.kv_bytes_per_position(mc, SERVE_BYTES))
  flops = rows_dev * costs.decode_flops_per_token(mc, window)
  step_s = max(read / (rates.window_hbm_efficiency * rates.hbm_bytes_per_s),
               flops / (rates.decode_mfu * rates.peak_flops)) + (
                   top_p_seconds(mc, rows_dev, rates) if top_p else 0.0)
  prefill = (chunk / devices) * l_bucket * costs.score_flops_per_token(mc, l_bucket) / (
      rates.score_mfu * rates.peak_flops)
  # Each generate casts the fp32 master weights to bf16 once (decode_weights).
  cast = costs.all_params(mc) * (4 + SERVE_BYTES) / devices / (
      rates.hbm_efficiency * rates.hbm_bytes_per_s)
  return Generate(calls * (steps * step_s + prefill) + cast, calls, chunk * n, steps, window,
                  chunk)


def makespan(lengths_R: np.ndarray, slots: int) -> int:
  """Decode steps of continuous batching: ``slots`` rows at a time, in order, each
  taking the next free slot."""
  free = [0] * min(slots, len(lengths_R))
  heapq.heapify(free)
  end = 0
  for length in lengths_R:
    start = heapq.heappop(free)
    end = max(end, start + int(length))
    heapq.heappush(free, start + int(length))
  return end


def pool_generate(mc, lengths, *, prompts: int, n: int, prompt_longest: int, slots: int,
                  rates, prefill_chunk: int = 16, prefill_group: int = 8, seed: int = 0,
                  live: bool = True, refill_at: int = 0, devices: int = 1,
                  top_p: bool = False) -> Generate:
  """The slot pool's ``generate`` of ``prompts`` x ``n`` rows over ``slots`` slots split
  over ``devices``, which step together: makespan steps, each device reading every
  weight (whole on each) and, of its slots / ``devices``, with the live-token kernel
  (``live``, the pool's choice on GPUs) each row's prompt and tokens so far, else the
  whole windows (the call's prompt bucket + new-token bucket); plus a prefill per row: its
  prompt's FLOPs (each chunk attends over the prompt's slots, not the window), or,
  where more, the weights read once per chunk pass. The first
  fill prefills ``prefill_group`` rows a pass; later rows enter in refills of
  ``refill_at`` (0: ``prefill_group``) on one of the ``devices`` (the module's equation),
  and while the queue lasts (``refill_at`` - 1) / 2 slots of each device idle."""
  rows = lengths.sample(prompts * n, seed).astype(np.float64)
  per_device = max(1, slots // devices)
  refill = min(max(1, refill_at or prefill_group), per_device)
  busy = slots - devices * (refill - 1) / 2
  steps = makespan(rows, max(1, int(busy)))
  width = -(-prompt_longest // prefill_chunk) * prefill_chunk  # a prompt's prefill chunks
  # The call's window: its longest prompt's bucket in whole chunks, as the pool sizes it.
  window = pool_prompt_width(prompt_longest, prefill_chunk) + bucket(lengths.cap, 16)
  kv = costs.kv_bytes_per_position(mc, SERVE_BYTES)
  # Per device: the weights every step, a devices-th of the rows' KV and FLOPs.
  if live:  # a row's span, from its first prompt token to its newest
    read = (steps * SERVE_BYTES * costs.all_params(mc)
            + kv * float(np.sum(rows * prompt_longest + rows * (rows - 1) / 2)) / devices)
    flops = float(sum(length * costs.decode_flops_per_token(mc, int(prompt_longest + length / 2))
                      for length in rows)) / devices
  else:
    read = steps * (SERVE_BYTES * costs.all_params(mc) + per_device * window * kv)
    flops = steps * per_device * costs.decode_flops_per_token(mc, window)
  decode = max(read / ((rates.live_hbm_efficiency if live else rates.window_hbm_efficiency)
                       * rates.hbm_bytes_per_s),
               flops / (rates.decode_mfu * rates.peak_flops))
  if top_p:  # every slot samples at every step, free ones too (fixed shapes)
    decode += top_p_seconds(mc, steps * per_device, rates)
  group, later = max(1, min(prefill_group, per_device)), max(0, prompts * n - slots)
  fill_passes = -(-min(per_device, -(-prompts * n // devices)) // group)
  passes = (fill_passes + -(-later // refill) * -(-refill // group)) * (width // prefill_chunk)
  prefill = max(prompts * n * width * costs.score_flops_per_token(mc, width)
                / (rates.score_mfu * rates.peak_flops),
                passes * SERVE_BYTES * costs.all_params(mc)
                / (rates.hbm_efficiency * rates.hbm_bytes_per_s))
  cast = costs.all_params(mc) * (4 + SERVE_BYTES) / (rates.hbm_efficiency * rates.hbm_bytes_per_s)
  return Generate(decode + prefill + cast, 1, slots, steps, 0 if live else window)


def vllm_slots(mc, lengths, *, n: int, prompt_mean: float, share_bytes: float,
               max_num_seqs: int, requests_in_flight: int, overhead_bytes: float) -> int:
  """C: the rows a server decodes at once: its ``max_num_seqs``, the requests in flight x n,
  and the sequences its KV cache (its share less the weights and ``overhead_bytes``) holds
  at the mean context."""
  kv = share_bytes - SERVE_BYTES * costs.all_params(mc) - overhead_bytes
  tokens = kv / costs.kv_bytes_per_position(mc, SERVE_BYTES)
  held = int(tokens // (prompt_mean + lengths.expected()))
  return max(1, min(max_num_seqs, requests_in_flight * n, held))


def vllm_generate(mc, lengths, *, prompts: int, n: int, prompt_mean: float, slots: int,
                  rates, seed: int = 0, top_p: bool = False, host_s_per_step: float = 0.0,
                  host_s_per_token: float = 0.0) -> Generate:
  """A vLLM server's ``generate`` of ``prompts`` x ``n`` rows over ``slots`` slots, its
  host's time per step and per token outside the GPU's (the module's equation)."""
  rows = lengths.sample(prompts * n, seed).astype(np.float64)
  steps = makespan(rows, slots)
  kv = costs.kv_bytes_per_position(mc, SERVE_BYTES)
  read = steps * SERVE_BYTES * costs.all_params(mc) + kv * np.sum(
      rows * prompt_mean + rows * (rows - 1) / 2)
  flops = sum(float(length) * costs.decode_flops_per_token(mc, int(prompt_mean + length / 2))
              for length in rows)
  # Prefix caching prefills each prompt once for its n rows.
  prefill = prompts * prompt_mean * costs.score_flops_per_token(mc, int(prompt_mean)) / (
      rates.score_mfu * rates.peak_flops)
  seconds = max(read / (rates.paged_hbm_efficiency * rates.hbm_bytes_per_s),
                flops / (rates.decode_mfu * rates.peak_flops)) + prefill + (
                    top_p_seconds(mc, float(np.sum(rows)), rates) if top_p else 0.0)
  seconds += steps * host_s_per_step + float(np.sum(rows)) * host_s_per_token
  return Generate(seconds, 1, slots, steps, 0)
