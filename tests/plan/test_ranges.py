"""The plan's stated inputs and its ranges: every input's point is the plan's value, each
engine's range holds its point, each input moves the plan the way its meaning says, and
one range end by hand in float64."""

import dataclasses

import numpy as np
import pytest

from graft_jax.config import run_config as config_lib
from graft_jax.config.checks import policy_configs
from graft_jax.models.config import ModelConfig
from graft_jax.plan import costs, inputs, phases, ranges, run, sampling_plan, server_layout
from graft_jax.plan import step_time
from graft_jax.plan.lengths import ResponseLengths

# +1: a higher value costs more GPU-hours; -1: fewer (a rate or a share).
COSTLIER_WHEN_HIGHER = {
    "paged_hbm_efficiency": -1, "live_hbm_efficiency": -1, "decode_mfu": -1,
    "pallas_attention_share": -1, "nccl_bytes_per_s": -1, "ipc_bytes_per_s": -1,
    "top_p_vocab_reads": 1, "vllm_host_s_per_step": 1, "vllm_host_s_per_token": 1,
    "shared_gpu_factor": 1, "vllm_overhead_bytes": 1, "vllm_start_s": 1,
    "tokenizer_tokens_per_s": -1, "host_copy_bytes_per_s": -1}
# Inputs each engine's plan must move (the others may not reach it).
MOVES = {"JAX static sampler": {"top_p_vocab_reads", "tokenizer_tokens_per_s"},
         "JAX slot pool": {"live_hbm_efficiency", "top_p_vocab_reads"},
         "vLLM": {"paged_hbm_efficiency", "vllm_host_s_per_step", "vllm_host_s_per_token",
                  "shared_gpu_factor", "vllm_overhead_bytes", "nccl_bytes_per_s", "vllm_start_s"}}


@pytest.fixture(scope="module")
def pair1():
  cfg = config_lib.from_config_dict(config_lib.load_config("configs/pair_smollm3_qwen3.py"))
  models = {m.name: run.model_config(m) for m in policy_configs(cfg)}
  a = phases.Assumptions(lengths=ResponseLengths(cfg.max_response_len, 1200, 2.0))
  layout = dataclasses.replace(server_layout.REPLICAS_4, replicas=4)
  got = ranges.engine_ranges(cfg, models, 4, step_time.MEASURED_H200, a, 174, sync="nccl",
                             layout=layout)
  return cfg, models, a, {r.label: r for r in got}


def test_the_table_states_each_input_once_at_the_plans_value():
  defaults = {**dataclasses.asdict(step_time.MEASURED_H200),
              **{f.name: f.default for f in dataclasses.fields(phases.Assumptions)}}
  names = [i.name for i in inputs.INPUTS]
  assert len(set(names)) == len(names)
  for i in inputs.INPUTS:
    assert i.low <= i.point <= i.high and i.source, i.name
    assert i.point == defaults[i.name], i.name
    assert i.source.startswith("measured: " if i.measured else "stated: "), i.name
  assert set(COSTLIER_WHEN_HIGHER) == {i.name for i in inputs.INPUTS if not i.measured}
  with pytest.raises(KeyError, match="not an input"):
    inputs.with_values(step_time.Rates(), phases.Assumptions(lengths=None), {"nope": 1.0})


def test_every_engines_range_holds_its_point(pair1):
  *_, got = pair1
  assert list(got) == list(ranges.ENGINES)
  for label, r in got.items():
    assert r.low.step_seconds <= r.point.step_seconds <= r.high.step_seconds, label
    assert r.low.gpu_hours() <= r.point.gpu_hours() <= r.high.gpu_hours(), label
    assert r.low.gpu_hours() < r.high.gpu_hours(), label
    sizes = [s.size for s in r.swings]
    assert sizes == sorted(sizes, reverse=True), label
    # No one input moves the plan further than all of them together.
    assert max(sizes) <= r.high.gpu_hours() - r.low.gpu_hours() + 1e-9, label


def test_each_input_moves_the_plan_its_way(pair1):
  *_, got = pair1
  for label, r in got.items():
    swings = {s.name: s for s in r.swings}
    for name, sign in COSTLIER_WHEN_HIGHER.items():
      low, high = swings[name].gpu_hours
      assert np.sign(high - low) in (0, sign), (label, name, low, high)
      if name in MOVES[label]:
        assert np.sign(high - low) == sign, (label, name, low, high)
  # vLLM's inputs do not reach the JAX engines.
  assert got["JAX slot pool"].point.gpu_hours() == pytest.approx(
      {s.name: s for s in got["JAX slot pool"].swings}["paged_hbm_efficiency"].gpu_hours[0])


def test_vllms_high_end_sampling_by_hand(pair1):
  """Every stated input at its costlier end, each model's 4 replicas with 32 prompts x 8
  rows, float64 from the equation in `sampling_plan`'s docstring."""
  cfg, models, a, got = pair1
  high = {i.name: (i.high if COSTLIER_WHEN_HIGHER[i.name] > 0 else i.low)
          for i in inputs.INPUTS if not i.measured}
  lengths, total = a.lengths, 0.0
  for mc in models.values():
    n_all = np.float64(costs.all_params(mc))
    kv = np.float64(costs.kv_bytes_per_position(mc, 2))
    held = (0.25 * 141e9 - 2 * n_all - high["vllm_overhead_bytes"]) / kv // (
        256 + lengths.expected())
    slots = int(min(256, 32 * 8, held))
    rows = lengths.sample(32 * 8, 0).astype(np.float64)
    steps = sampling_plan.makespan(rows, slots)
    read = steps * 2 * n_all + kv * np.sum(rows * 256 + rows * (rows - 1) / 2)
    flops = np.sum([l * costs.decode_flops_per_token(mc, int(256 + l / 2)) for l in rows])
    prefill = 32 * 256 * costs.score_flops_per_token(mc, 256) / (0.51 * 989e12)
    total += (max(read / (high["paged_hbm_efficiency"] * 4.8e12),
                  flops / (high["decode_mfu"] * 989e12)) + prefill
              + steps * high["vllm_host_s_per_step"]
              + np.sum(rows) * high["vllm_host_s_per_token"])
  expected = high["shared_gpu_factor"] * total
  assert got["vLLM"].high.phase_seconds("sampling") == pytest.approx(expected, rel=1e-12)
  assert got["vLLM"].high.phase_seconds("sampling") > 1.5 * got["vLLM"].point.phase_seconds(
      "sampling")


def test_top_p_reads_each_rows_logits_per_decode_step():
  """The static sampler's call with top-p: every row of a device reads its fp32 logits
  row (151,936 entries for Qwen3) ``top_p_vocab_reads`` times at every decode step."""
  mc, rates = ModelConfig.qwen3_1p7b(), step_time.MEASURED_H200
  lengths = ResponseLengths(4096, 1200, 2.0)
  call = lambda top_p: sampling_plan.jax_generate(
      mc, lengths, prompts=64, n=4, prompt_longest=400, budget=32 * 2**30, devices=4,
      rates=rates, top_p=top_p)
  plain, nucleus = call(False), call(True)
  rows_per_device = plain.rows_per_call / 4
  by_hand = (plain.calls * plain.steps_per_call * rows_per_device * 151_936 * 4 * 2.0
             / (0.19 * 4.8e12))
  assert nucleus.seconds - plain.seconds == pytest.approx(by_hand, rel=1e-9)
