"""The plan per phase and engine: its phases are the ones the trainer records, its terms
add up to the step and the run, and its sampler term follows the sampler's own plan."""

import dataclasses

import numpy as np
import pytest

from graft_jax.config import run_config as config_lib
from graft_jax.models.config import ModelConfig
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.plan import costs, phases, sampling_plan, step_time
from graft_jax.plan.lengths import ResponseLengths
from graft_jax.train.trainer import Trainer
from graft_jax.train.validation import Validator
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg


def _pair_cfg(preset="graft"):
  return config_lib.from_config_dict(
      config_lib.load_config(f"configs/pair_smollm3_qwen3.py:{preset}"))


def _models():
  return {"smollm3_3b": ModelConfig.smollm3_3b(), "qwen3_1p7b": ModelConfig.qwen3_1p7b()}


def test_the_plans_phases_are_the_phases_the_trainer_records(tmp_path):
  cfg = make_cfg("graft", tmp_path)  # a checkpoint after every step
  validator = Validator({"say": tiny_pair.problems(4, seed=9)}, every_steps=1, k=2,
                        temperature=1.0, top_p=1.0, seed=cfg.seed,
                        max_new_tokens=cfg.max_response_len,
                        prompt_suffix=cfg.data.prompt_suffix, score_fn=tiny_pair.contains_reward)
  trainer = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(),
                    reward_fn=tiny_pair.contains_reward, validator=validator)
  trainer.run(2)
  trainer.close()
  rows = read_jsonl(tmp_path / "metrics.jsonl")
  names = list(trainer.policies)
  keys = {k[len("time/"):] for r in rows for k in r if k.startswith("time/")}
  assert phases.recorded_phases(dict.fromkeys(keys), names) == set(phases.PHASE_TIMINGS)
  covered = {pat.format(m=m) for pats in phases.PHASE_TIMINGS.values() for pat in pats
             for m in names}
  bookkeeping = {"step_s", "compiles"} | {f"{m}/{phase}_{e}_s" for m in names
                                          for phase in ("sample", "eval")
                                          for e in ("start", "end")}
  assert keys - bookkeeping == covered  # no recorded phase the plan leaves out
  assert rows[0]["time/compiles"] > 0 and rows[0]["time/compile_s"] > 0  # the first step's
  assert rows[0]["time/checkpoint_s"] == 0.0 < rows[1]["time/checkpoint_s"]  # step 0's save


@pytest.mark.parametrize("engine", ["jax", "vllm"])
def test_the_terms_add_up_to_the_step_and_the_run(engine):
  cfg, models = _pair_cfg(), _models()
  a = phases.Assumptions(lengths=ResponseLengths(4096, 1200, 2.0))
  plan = phases.plan_engine(cfg, models, engine, 4, step_time.MEASURED_H200, a, 174)
  assert set(plan.step_terms) == set(phases.STEP_PHASES)
  assert set(plan.run_terms) == set(phases.RUN_PHASES)
  per_model = {p: [t.seconds for t in plan.step_terms[p].values()] for p in phases.STEP_PHASES}
  # vLLM's two servers sample side by side; everything else takes turns on the trainer.
  sampling = max(per_model["sampling"]) if engine == "vllm" else sum(per_model["sampling"])
  step = sampling + sum(sum(v) for p, v in per_model.items() if p != "sampling")
  assert plan.step_seconds == pytest.approx(step)
  extra = sum(t.seconds for t in plan.run_terms.values())
  assert plan.run_seconds(True) == pytest.approx(174 * step + extra)
  no_val = 174 * step + extra - plan.run_terms["validation"].seconds
  assert plan.gpu_hours(False) == pytest.approx(no_val * 4 / 3600)
  # 174 steps validated every 29 (and after the last): 6 times; saved every 10 and at the end.
  assert plan.run_terms["validation"].detail.startswith("6 x ")
  assert plan.run_terms["checkpoint"].detail.startswith("18 x ")
  text = phases.format_plan(plan, models)
  assert all(f"\n  {p} " in text for p in phases.STEP_PHASES + phases.RUN_PHASES)
  assert "(the paper, GRAFT on pair 1: 40.9 GPU-hours)" in text


def test_the_jax_sampler_term_reads_the_whole_window_in_its_calls():
  # Qwen3-1.7B, 128 prompts x 8 on 4 devices under 32 GiB per device: a prompt's 9 rows of
  # 512 + 4,096 slots hold 9 x 2 x 28 x 8 x 128 x 4,608 x 2 bytes = 4.76 GB, so a call is
  # the largest power of two of prompts within 4 x 32 GiB: 16, and 8 calls.
  mc, rates = ModelConfig.qwen3_1p7b(), step_time.MEASURED_H200
  lengths = ResponseLengths(4096, 1200, 2.0)
  g = sampling_plan.jax_generate(mc, lengths, prompts=128, n=8, prompt_longest=400,
                                 budget=32 * 2**30, devices=4, rates=rates)
  assert 9 * 2 * 28 * 8 * 128 * 4608 * 2 == 4_756_340_736
  assert (g.window, g.chunk, g.calls, g.rows_per_call) == (4608, 16, 8, 128)
  n_all = costs.all_params(mc)
  step_read = 2 * n_all + 32 * 4608 * 2 * 28 * 8 * 128 * 2  # every weight, 32 rows' windows
  decode = 8 * g.steps_per_call * step_read / (rates.window_hbm_efficiency * 4.8e12)
  assert g.seconds > decode and g.seconds == pytest.approx(decode, rel=0.02)


def test_vllm_steps_follow_continuous_batching():
  # Two slots: 5 in one; 1, 1, 1 then 4 in the other, which frees at 3 and ends at 7.
  assert sampling_plan.makespan(np.array([5, 1, 1, 1, 4]), 2) == 7
  assert sampling_plan.makespan(np.array([3, 3, 3]), 8) == 3
  mc, rates = ModelConfig.qwen3_1p7b(), step_time.MEASURED_H200
  lengths = ResponseLengths(1024, 300, 2.0)
  g = sampling_plan.vllm_generate(mc, lengths, prompts=4, n=2, prompt_mean=100, slots=8,
                                  rates=rates)
  rows = lengths.sample(8).astype(float)
  read = (g.steps_per_call * 2 * costs.all_params(mc) + costs.kv_bytes_per_position(mc)
          * np.sum(rows * 100 + rows * (rows - 1) / 2))
  assert g.steps_per_call == rows.max()  # 8 slots: every row at once
  assert g.seconds >= read / (rates.paged_hbm_efficiency * rates.hbm_bytes_per_s)


def test_response_lengths_against_independent_draws():
  lengths = ResponseLengths(4096, 1200, 2.0)
  assert lengths.expected() == pytest.approx(1200, rel=1e-6)
  # The same clipped gamma drawn with NumPy, its scale found on the draws themselves.
  rng = np.random.default_rng(0)
  x = np.minimum(np.maximum(np.ceil(rng.gamma(2.0, _scale_by_draws(rng), (4000, 128))), 1), 4096)
  assert x.mean() == pytest.approx(1200, rel=0.01)
  assert lengths.truncated == pytest.approx((x == 4096).mean(), abs=0.002)
  assert lengths.expected_max(128) == pytest.approx(x.max(axis=1).mean(), rel=0.01)
  sample = lengths.sample(1024)
  assert sample.mean() == pytest.approx(1200, rel=0.02) and sample.max() <= 4096


def _scale_by_draws(rng):
  """The gamma scale whose clipped, rounded-up draws average 1,200, found on draws."""
  z = rng.gamma(2.0, 1.0, 200_000)
  lo, hi = 100.0, 2000.0
  for _ in range(60):
    mid = (lo + hi) / 2
    m = np.minimum(np.maximum(np.ceil(z * mid), 1), 4096).mean()
    lo, hi = (mid, hi) if m < 1200 else (lo, mid)
  return lo


def test_eval_calls_of_the_paper_suite():
  calls = phases.eval_calls(_pair_cfg())
  assert sum(calls) == 872 and len(calls) == 8 + 1 + 1 + 1 + 5 and max(calls) == 64


def test_packed_rows_are_charged_for_the_kernel_that_runs():
  """The pair config (bf16, head_dim 128) on an H100 / H200 (compute capability 9.0)
  attends packed rows in cuDNN's packed layout, on an A100 (8.0) in the Pallas kernel:
  its whole-row tiles at its share of cuDNN's rate make scoring and the update slower."""
  cfg, models = _pair_cfg(), _models()
  a = phases.Assumptions(lengths=ResponseLengths(4096, 1200, 2.0))
  hopper = step_time.MEASURED_H200
  ampere = dataclasses.replace(hopper, compute_capability="8.0")
  assert {phases.packed_kernel(cfg, mc, hopper) for mc in models.values()} == {"cudnn_packed"}
  assert {phases.packed_kernel(cfg, mc, ampere) for mc in models.values()} == {"pallas"}
  plans = [phases.plan_engine(cfg, models, "jax", 4, r, a, 10) for r in (hopper, ampere)]
  for phase in ("scoring", "update"):
    fast, slow = (p.phase_seconds(phase) for p in plans)
    assert 0 < fast < slow, phase
  assert "attention cudnn_packed" in plans[0].step_terms["update"]["qwen3_1p7b"].detail


def test_a_call_with_a_fuller_row_is_charged_as_pallas():
  """`packed_call_flops`: cuDNN's layout takes up to MAX_SEGMENTS sequences a row; one
  more sends the whole call to the Pallas kernel, as `packed_gpu_attention` does."""
  mc, rates = ModelConfig.qwen3_1p7b(), step_time.MEASURED_H200
  m = phases.MAX_SEGMENTS
  lengths = [64] * (m + 1)
  call = lambda bins, kernel: phases.packed_call_flops(mc, lengths, bins, 2, 2048, kernel, rates,
                                                       passes=3)
  fits, full = [list(range(m))], [list(range(m + 1))]
  assert call(fits, "cudnn_packed") < call(fits, "pallas")
  assert call(full, "cudnn_packed") == call(full, "pallas")
  # Pallas's attention at half of cuDNN's rate: its FLOPs count twice
  matmul, attention = costs.packed_row_flops(mc, [], 2048, "pallas", passes=3)
  assert call(full, "pallas") == pytest.approx(2 * (matmul + attention / 0.5))
