"""Every program of the paper's pair runs lowered for CUDA and for a TPU on this CPU
(`graft_jax.plan.lowering`): each program of each pair's models at their real widths,
heads, head_dim and vocabulary, with the kernels the target runs in it."""

import pathlib

import jax.numpy as jnp
import pytest

from graft_jax import backends
from graft_jax.models import logprobs
from graft_jax.packing import sequence_packing
from graft_jax.config import load as config_load
from graft_jax.plan import lowering
from graft_jax.train import methods
from graft_jax.train.policy import PoolSettings
from graft_jax.train.update import micro_batch_budget
from tests import fake_devices

CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[2] / "configs").glob("pair_*.py"))
TRITON, MOSAIC, CUDNN, CUDNN_BWD = (lowering.TRITON, lowering.MOSAIC_TPU, lowering.CUDNN_FORWARD,
                                    lowering.CUDNN_BACKWARD)
# The kernels each program must hold. CUDA (an H100): a decode step in the live-span
# kernel (Triton), a prefill and unpacked rows in cuDNN's attention, packed rows in
# cuDNN's packed layout with Pallas's flash kernel (Triton) beside it for fuller rows;
# the pool's prefill chunks walk key blocks in plain JAX. TPU:
# splash attention, and the pool's decode steps in the live-span kernel (Mosaic); the
# static sampler's windows are not whole 128-slot blocks, so XLA decodes.
KERNELS = {
    "sampler": ({TRITON, CUDNN}, {MOSAIC}),
    "pool": ({TRITON}, {MOSAIC}),
    "scoring_packed": ({TRITON, CUDNN}, {MOSAIC}),
    "scoring_bucketed": ({CUDNN}, {MOSAIC}),
    "exchange_scoring": ({TRITON, CUDNN}, {MOSAIC}),
    "update_packed": ({TRITON, CUDNN, CUDNN_BWD}, {MOSAIC}),
    "update_bucketed": ({CUDNN, CUDNN_BWD}, {MOSAIC}),
    "optimizer_step": (set(), set()),
    "validation": ({TRITON, CUDNN}, {MOSAIC}),
    "validation_pool": ({TRITON}, {MOSAIC}),
}


@pytest.fixture(scope="module")
def runs():
  """(config, {name: ModelConfig}) of each pair's run, each model once."""
  out, seen = [], set()
  for path in CONFIGS:
    cfg = methods.from_config_dict(config_load.load_config(str(path)))
    models = {n: mc for n, mc in lowering.run_models(cfg).items() if n not in seen}
    seen.update(models)
    out.append((cfg, models))
  return out


def test_the_pairs_have_three_models(runs):
  """SmolLM3-3B (NoPE layers), Qwen3-1.7B (q/k norms) and Llama 3.2 3B (3 queries per kv
  head), each lowered once."""
  assert {n for _, models in runs for n in models} == {"smollm3_3b", "qwen3_1p7b",
                                                        "octothinker_3b"}


@pytest.mark.parametrize("platform", sorted(lowering.PLATFORMS))
@pytest.mark.parametrize("program", lowering.PROGRAMS)
def test_lowers(runs, program, platform):
  want = KERNELS[program][sorted(lowering.PLATFORMS).index(platform)]
  for cfg, models in runs:
    for name, mc in models.items():
      found = lowering.kernel_calls(lowering.lower(cfg, program, mc, platform))
      assert want <= found, f"{name}: {program} for {platform} holds {sorted(found)}"


def test_cudnn_lowers_only_with_an_h100s_answers(runs):
  """Off a GPU cuDNN's lowering stops at its version query; `lowering.h100_cudnn`
  answers it and the capability queries as an H100, and names the H100's capability to
  `traced_for` (the door's answer, and the traces' key), for the length of the lowering
  only. A program lowered as for an H100 is traced again for a GPU of none known: its
  H100 trace is not reused."""
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa  # pylint: disable=import-outside-toplevel
  cfg, models = runs[0]
  mc = next(iter(models.values()))
  packed = lambda: backends.packed_attention_kernel(jnp.bfloat16, 128)
  with lowering.h100_cudnn():
    assert cudnn_fa.check_cudnn_version() == lowering.H100_CUDNN
    assert cudnn_fa.check_compute_capability("9.0")
    assert not cudnn_fa.check_compute_capability("10.0")
    assert backends.target_capability() == "9.0" and packed() == "cudnn_packed"
  with backends.traced_for("gpu", lowering=True):
    assert packed() == "pallas"
  with pytest.raises(RuntimeError, match="cuDNN is not detected"):
    cudnn_fa.check_cudnn_version()
  assert CUDNN in lowering.kernel_calls(lowering.lower(cfg, "scoring_bucketed", mc, "cuda"))
  with pytest.raises(RuntimeError, match="cuDNN is not detected"):
    lowering.lower(cfg, "scoring_bucketed", mc, "cuda", as_h100=False)


def per_device_rows(cfg, program: str) -> int:
  """The most rows one device takes in a call of ``program`` of the run ``cfg`` on 4
  devices: the pool's slots (a quarter of them; fewer after it shrinks), a scoring
  call's rows (`score_rows`: at most 64 over all devices) or an update micro-batch's."""
  if program.endswith("pool"):
    return PoolSettings.from_config(cfg).slots // 4
  budget = micro_batch_budget(cfg.perf.micro_batch_tokens)
  cap = cfg.max_prompt_len + cfg.max_response_len
  row, bucket = sequence_packing.packed_row_length(cap), logprobs.bucket_length(cap, cap)
  if program.startswith("update"):
    return sequence_packing.rows_per_call(budget, bucket, 1)
  length = {"scoring_packed": row, "scoring_bucketed": bucket,
            "exchange_scoring": sequence_packing.long_row_length(row + 1, row)}[program]
  return min(sequence_packing.rows_per_call(budget, length, 16), 16)


@pytest.fixture(scope="module")
def sharded():
  """The pool's, scoring's and the update's programs lowered on the pairs' mesh over 4
  fake CPU devices (FSDP over all 4, as on a 4-GPU node): `sharded_lowering_script`'s
  report."""
  return fake_devices.run_script("tests.plan.sharded_lowering_script", devices=4, timeout=900)


def test_the_programs_lower_sharded_on_the_pairs_mesh(runs, sharded):
  """Every sharded program lowers for CUDA and a TPU with its kernels (a Mosaic kernel
  that is not run per device cannot lower under a mesh at all), and each Triton call
  takes one device's rows: a kernel call has no partitioning rule, so outside a
  ``shard_map`` every device would gather and attend the rows of all four. cuDNN's
  attention is partitioned by JAX's own rule (``custom_partitioning``), a Python
  callback that gives its custom calls only when XLA compiles: here it stands as the
  callback's call."""
  assert sharded["mesh"] == {"data": 1, "fsdp": 4, "tensor": 1} and sharded["shards"] == 4
  names = {n for _, models in runs for n in models}
  assert len(sharded["programs"]) == len(names) * 2 * len(lowering.SHARDED_PROGRAMS)
  for key, result in sharded["programs"].items():
    name, program, platform = key.split()
    assert "error" not in result, f"{key}: {result}"
    want = KERNELS[program][sorted(lowering.PLATFORMS).index(platform)]
    assert want - {CUDNN, CUDNN_BWD} <= set(result["kernels"]), f"{key}: {result['kernels']}"
    assert (result["partitioned"] > 0) == (CUDNN in want), key
    if TRITON in want:
      rows = per_device_rows(runs[0][0], program)
      assert result["triton_rows"] and max(result["triton_rows"]) == rows, key


def test_the_kernel_run_per_device_gives_the_one_device_values(sharded):
  """The Pallas GPU kernel on each device's rows (``shard_map``, Pallas's interpret mode)
  gives a loss of packed attention and its gradients as on one device, to float32's
  rounding of the sums."""
  assert sharded["per_device_gap"] < 1e-6
