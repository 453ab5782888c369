"""The slot pool's sampler term: makespan steps over the pool, each reading every weight
and each row's live span (or, without the live-token kernel, every slot's whole window);
the plan uses it, and validates in one call per model, when the config selects the pool."""

import numpy as np
import pytest

from graft_jax.config import run_config as config_lib
from graft_jax.models.config import ModelConfig
from graft_jax.plan import costs, phases, sampling_plan, step_time
from graft_jax.plan.lengths import ResponseLengths


def test_the_pool_term_reads_every_slots_window_for_the_makespan():
  # Qwen3-1.7B, 128 prompts x 8 in 256 slots; the call's longest prompt, 400 tokens, takes
  # its 512 bucket (a multiple of the 256-token chunk), responses up to 4,096: a window of
  # 4,608 slots.
  mc, rates = ModelConfig.qwen3_1p7b(), step_time.MEASURED_H200
  lengths = ResponseLengths(4096, 1200, 2.0)
  g = sampling_plan.pool_generate(mc, lengths, prompts=128, n=8, prompt_longest=400, slots=256,
                                  rates=rates, live=False, prefill_chunk=256)
  rows = lengths.sample(1024)
  # Refills wait for 8 free slots: about 3.5 of the 256 idle while the queue lasts.
  assert g.steps_per_call == sampling_plan.makespan(rows, 252)
  # The pool ends after the longest row and no later than a static batch of 4 x 256 rows.
  assert rows.max() <= g.steps_per_call < 4 * rows.max()
  assert (g.window, g.calls, g.rows_per_call) == (4608, 1, 256)
  step_read = 2 * costs.all_params(mc) + 256 * 4608 * 2 * 28 * 8 * 128 * 2
  decode = g.steps_per_call * step_read / (rates.window_hbm_efficiency * 4.8e12)
  assert g.seconds > decode and g.seconds == pytest.approx(decode, rel=0.05)


def test_the_live_pool_term_reads_each_rows_span():
  # A row of l tokens after a 400-token prompt reads 400 + t positions at its step t.
  mc, rates = ModelConfig.qwen3_1p7b(), step_time.MEASURED_H200
  lengths = ResponseLengths(4096, 1200, 2.0)
  # One prefill pass per group: prefill stays small beside the decode.
  g = sampling_plan.pool_generate(mc, lengths, prompts=128, n=8, prompt_longest=400, slots=256,
                                  rates=rates, prefill_chunk=400)
  rows = lengths.sample(1024).astype(np.float64)
  per_position = 2 * 28 * 8 * 128 * 2  # K and V, 28 layers, 8 heads of 128, bf16
  span = sum(sum(400 + t for t in range(int(l))) for l in rows)
  read = g.steps_per_call * 2 * costs.all_params(mc) + per_position * span
  decode = read / (rates.window_hbm_efficiency * 4.8e12)
  assert g.window == 0 and g.seconds > decode and g.seconds == pytest.approx(decode, rel=0.05)
  window = sampling_plan.pool_generate(mc, lengths, prompts=128, n=8, prompt_longest=400,
                                       slots=256, rates=rates, live=False)
  assert g.seconds < 0.6 * window.seconds


def test_prefill_reads_the_weights_once_per_chunk_pass_of_a_group():
  """1,024 rows of a 400-token prompt in 16-token chunks, 25 passes a prompt, each
  reading every bf16 weight: the first fill of 256 slots in groups, the other 768 rows
  alone where a refill comes at each free slot (``refill_at`` = 1). Groups of 1
  (1,024 x 25 passes) and of 2 (896 x 25) are both bound by those reads (their FLOPs
  are the same), so their difference is 128 x 25 passes' reads."""
  mc, rates = ModelConfig.qwen3_1p7b(), step_time.MEASURED_H200
  lengths = ResponseLengths(4096, 1200, 2.0)
  run = lambda group: sampling_plan.pool_generate(
      mc, lengths, prompts=128, n=8, prompt_longest=400, slots=256, rates=rates,
      prefill_chunk=16, prefill_group=group, refill_at=1).seconds
  one_pass = 2 * costs.all_params(mc) / (rates.hbm_efficiency * 4.8e12)
  assert run(1) - run(2) == pytest.approx(128 * 25 * one_pass, rel=1e-9)
  flops = 1024 * 400 * costs.score_flops_per_token(mc, 400) / (rates.score_mfu * 989e12)
  assert 896 * 25 * one_pass > flops  # groups of 2 are still bound by the weight reads
  assert run(8) < run(2)


def test_refills_wait_for_a_group_of_free_slots_on_a_device():
  """Groups of 8, a device refilling once 8 of its slots are free (refill_at 0: the
  group): 256 slots on 4 devices, 64 each, first filled in 8 passes at once on every
  device; the other 768 rows in 96 refills of one pass, one device's at a time. While
  the queue lasts (8 - 1) / 2 slots of each device idle: 256 - 14 busy."""
  mc, rates = ModelConfig.qwen3_1p7b(), step_time.MEASURED_H200
  lengths = ResponseLengths(4096, 1200, 2.0)
  pool = lambda **kw: sampling_plan.pool_generate(
      mc, lengths, prompts=128, n=8, prompt_longest=400, slots=256, rates=rates,
      prefill_chunk=16, prefill_group=8, **kw)
  one_pass = 2 * costs.all_params(mc) / (rates.hbm_efficiency * 4.8e12)
  rows = lengths.sample(1024)
  batched, lone = pool(devices=4), pool(devices=4, refill_at=1)
  assert batched.steps_per_call == sampling_plan.makespan(rows, 242)
  assert lone.steps_per_call == sampling_plan.makespan(rows, 256) < batched.steps_per_call
  # The same rows' KV reads; the idle slots' extra steps each read every weight, and
  # the prefill is bound by its passes' weight reads: (8 + 96) x 25 against (8 + 768) x 25.
  weights = 2 * costs.all_params(mc) / (rates.live_hbm_efficiency * 4.8e12)
  extra = (batched.steps_per_call - lone.steps_per_call) * weights
  assert batched.seconds - lone.seconds == pytest.approx(extra - 672 * 25 * one_pass, rel=1e-9)
  # One device: the first fill's 32 passes, 96 refills, 3.5 idle slots.
  assert pool(devices=1, refill_at=16).steps_per_call == sampling_plan.makespan(rows, 248)


def _pool_cfg(sampler):
  cd = config_lib.load_config("configs/pair_smollm3_qwen3.py:graft")
  with cd.unlocked():
    cd.rollout.sampler, cd.rollout.pool_slots = sampler, 256
  return config_lib.from_config_dict(cd)


def test_the_plan_samples_and_validates_through_the_pool_when_the_config_selects_it():
  models = {"smollm3_3b": ModelConfig.smollm3_3b(), "qwen3_1p7b": ModelConfig.qwen3_1p7b()}
  rates, lengths = step_time.MEASURED_H200, ResponseLengths(4096, 1200, 2.0)
  a = phases.Assumptions(lengths=lengths)
  cfg = _pool_cfg("pool")
  plan = phases.plan_engine(cfg, models, "jax", 1, rates, a, 10)
  static = phases.plan_engine(_pool_cfg("static"), models, "jax", 1, rates, a, 10)
  suite = sum(phases.eval_calls(cfg))
  assert phases.eval_calls(cfg, pool=True) == [suite] == [872]
  assert plan.run_terms["validation"].detail.endswith("(1 calls per model)")
  assert static.run_terms["validation"].detail.endswith(f"({len(phases.eval_calls(cfg))} "
                                                        f"calls per model)")
  validation = 0.0
  for name, mc in models.items():
    prefill = dict(prefill_chunk=cfg.rollout.pool_prefill_chunk,
                   prefill_group=cfg.rollout.pool_prefill_group,
                   refill_at=cfg.rollout.pool_refill_at)
    g = sampling_plan.pool_generate(mc, lengths, prompts=cfg.prompts_per_step, n=cfg.n,
                                    prompt_longest=a.prompt_longest, slots=256, rates=rates,
                                    **prefill)
    assert plan.step_terms["sampling"][name].seconds == g.seconds
    assert plan.step_terms["sampling"][name].seconds != static.step_terms["sampling"][name].seconds
    validation += sampling_plan.pool_generate(
        mc, lengths, prompts=872, n=cfg.eval.k, prompt_longest=a.prompt_longest, slots=256,
        rates=rates, top_p=cfg.eval.top_p < 1, **prefill).seconds  # validation's top-p
    validation += plan.step_terms["rewards"][name].seconds * 872 * cfg.eval.k / (
        cfg.prompts_per_step * cfg.n)  # the verifier's seconds scale with the items
  runs = phases.validations(cfg, 10)
  assert plan.run_terms["validation"].seconds == pytest.approx(runs * validation, rel=1e-9)
  # The pool's programs: a step's request capacity, raised once for the suite's call.
  pool_programs = int(plan.run_terms["compile"].detail.split()[0])
  static_programs = int(static.run_terms["compile"].detail.split()[0])
  static_sampler = sum(
      len({sampling_plan.jax_generate(
          mc, lengths, prompts=c, n=k, prompt_longest=a.prompt_longest,
          budget=cfg.perf.sampler_max_kv_bytes, devices=1, rates=rates).chunk
           for c, k in [(cfg.prompts_per_step, cfg.n)]
           + [(c, cfg.eval.k) for c in set(phases.eval_calls(cfg))]})
      for mc in models.values())
  assert pool_programs - static_programs == 2 * len(models) - static_sampler
