"""The weight sync's seconds per push for each way to move the weights, by hand."""

import pytest

from graft_jax.models.config import ModelConfig
from graft_jax.plan import step_time

QWEN3_1P7B_PARAMS = 1_720_574_976  # tests/plan/test_run.py: from the published shapes


def test_sync_choices_by_hand():
  mc = ModelConfig.qwen3_1p7b()
  got = step_time.sync_choices(mc, processes=4)
  b = 2 * QWEN3_1P7B_PARAMS  # bf16, the tied embedding once
  assert got["reload"] == pytest.approx(b / 0.2e9)
  assert got["nccl, each process sends its shards"] == pytest.approx(b / 100e9)
  assert got["nccl, process 0 gathers"] == pytest.approx(b * 3 / 4 / 20e9 + b / 100e9)
  one = step_time.sync_choices(mc, processes=1)  # nothing to gather from one process
  assert one["nccl, process 0 gathers"] == one["nccl, each process sends its shards"]
  text = step_time.format_sync_choices({"qwen3_1p7b": mc}, 4, "nccl")
  assert "4 trainer process(es) (this run: nccl)" in text
  assert f"nccl, process 0 gathers {b * 3 / 4 / 20e9 + b / 100e9:.2f} s" in text


def test_the_push_is_the_sync_the_placement_picks():
  from graft_jax.config import run_config as config_lib
  from graft_jax.config import load as config_load
  from graft_jax.config.placement import sync_backend
  cd = config_lib.load_config("configs/pair_smollm3_qwen3.py:vllm")
  mc = ModelConfig.qwen3_1p7b()

  def push_s():
    cfg = config_lib.from_config_dict(cd)
    sync = sync_backend(cfg, on_gpu=True)
    return step_time.weight_sync(mc, cfg.engine, sync, step_time.Rates()).seconds

  assert push_s() == pytest.approx(2 * QWEN3_1P7B_PARAMS / 100e9)  # auto: nccl on GPUs
  with cd.unlocked():
    config_load.set_field(cd, "vllm.weight_sync", "reload")
  assert push_s() == pytest.approx(2 * QWEN3_1P7B_PARAMS / 0.2e9)
