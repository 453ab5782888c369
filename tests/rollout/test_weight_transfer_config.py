"""vllm.weight_sync: 'nccl' and 'ipc' are accepted values, refused off CUDA in one line
that names the field; the server flags each backend needs."""

import pytest

from configs import toy
from graft_jax.rollout import weight_transfer
from graft_jax.config import run_config as config_lib
from graft_jax.config import checks as config_checks
from graft_jax.config.load import apply_overrides


def _cfg(*overrides):
  cd = toy.get_config("vllm")
  cd.unlock()
  apply_overrides(cd, list(overrides))
  return config_lib.from_config_dict(cd)


def test_reload_and_auto_stay_valid_everywhere():
  assert _cfg("vllm.weight_sync=reload").vllm.weight_sync == "reload"
  # 'auto', the default, picks per run (config_placement.sync_backend): reload on CPUs.
  assert _cfg().vllm.weight_sync == "auto"
  from graft_jax.rollout import vllm_setup
  assert vllm_setup.sync_backend(_cfg()) == "reload"  # this machine has no CUDA GPU


@pytest.mark.parametrize("sync", ["nccl", "ipc"])
def test_gpu_backends_are_refused_off_cuda_naming_the_field(sync, monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  with pytest.raises(config_lib.ConfigError) as e:
    _cfg(f"vllm.weight_sync={sync}")
  assert e.value.field == "vllm.weight_sync"
  assert f"vllm.weight_sync='{sync}'" in str(e.value) and "JAX_PLATFORMS=cpu" in str(e.value)
  assert "\n" not in str(e.value)


def test_gpu_platform_check_reads_the_platform_list():
  with pytest.raises(config_lib.ConfigError, match="JAX_PLATFORMS=tpu"):
    config_checks._check_weight_sync("ipc", environ={"JAX_PLATFORMS": "tpu"})
  config_checks._check_weight_sync("reload", environ={"JAX_PLATFORMS": "cpu"})


def test_unknown_backend_names_the_choices():
  with pytest.raises(config_lib.ConfigError, match="vllm.weight_sync"):
    _cfg("vllm.weight_sync=rdma")
  with pytest.raises(ValueError, match="expected one of"):
    weight_transfer.server_args("reload")


def test_server_flags():
  assert weight_transfer.server_args("nccl") == (
      "--weight-transfer-config", '{"backend": "nccl"}')
  assert dict(weight_transfer.server_env("ipc")) == {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
  assert weight_transfer.server_env("nccl") == ()
