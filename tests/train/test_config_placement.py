"""Placement configs: where vLLM servers and the trainer go, and how processes start.

Every impossible placement is one ``ConfigError`` whose message names the
fields to change; the sidecar options built from a good one carry
``CUDA_VISIBLE_DEVICES``, the tensor-parallel size and the bind address.
"""

import pytest

from configs import toy
from graft_jax.train import config as config_lib
from graft_jax.train import setup
from graft_jax.train.config_load import apply_overrides


def cfg_of(*overrides, preset="vllm"):
  cd = toy.get_config(preset)
  cd.unlock()
  apply_overrides(cd, list(overrides))
  return config_lib.from_config_dict(cd)


def error_of(*overrides, preset="vllm") -> config_lib.ConfigError:
  with pytest.raises(config_lib.ConfigError) as e:
    cfg_of(*overrides, preset=preset)
  return e.value


def test_server_on_the_trainers_gpus_without_a_split_names_the_fields():
  e = error_of("vllm.gpus.model_a=(0, 1)")
  msg = str(e)
  for field in ("vllm.gpus.model_a=(0, 1)", "jax_devices=()", "xla_mem_fraction",
                "vllm.gpu_memory_utilization", "GPU 0"):
    assert field in msg, msg
  assert e.field == "vllm.gpus.model_a"
  e = error_of("vllm.gpus.model_b=(3,)", "jax_devices=(2, 3)")
  assert "vllm.gpus.model_b=(3,) and jax_devices=(2, 3)" in str(e) and "GPU 3" in str(e)


def test_an_explicit_split_must_fit_the_gpu():
  e = error_of("vllm.gpus.model_a=(0,)", "vllm.gpus.model_b=(0,)", "xla_mem_fraction=0.3",
               "vllm.gpu_memory_utilization=0.4")
  assert "xla_mem_fraction=0.3 + 2 x vllm.gpu_memory_utilization=0.4 = 1.1 > 1" in str(e)
  assert e.field == "vllm.gpu_memory_utilization"
  # Two servers alone on a GPU the trainer does not use: their shares still add up.
  e = error_of("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(2,)", "jax_devices=(0, 1)",
               "vllm.gpu_memory_utilization=0.6")
  assert "2 x vllm.gpu_memory_utilization=0.6 = 1.2 > 1" in str(e)
  assert "xla_mem_fraction" not in str(e)


def test_good_placements_load():
  cfg_of("vllm.gpus.model_a=(0, 1)", "vllm.gpus.model_b=(2, 3)", "jax_devices=(4, 5, 6, 7)")
  cfg_of("vllm.gpus.model_a=(0,)", "vllm.gpus.model_b=(0,)", "xla_mem_fraction=0.5",
         "vllm.gpu_memory_utilization=0.25")
  # The JAX sampler ignores where vLLM would have gone.
  cfg_of("vllm.gpus.model_a=(0,)", preset="graft")


def test_tensor_parallel_size_follows_the_gpus():
  e = error_of("vllm.gpus.model_a=(0, 1)", "jax_devices=(2,)", "vllm.tensor_parallel_size=4")
  assert "vllm.tensor_parallel_size=4" in str(e) and "vllm.gpus.model_a=(0, 1)" in str(e)
  cfg = cfg_of("vllm.gpus.model_a=(0, 1)", "jax_devices=(2,)", "vllm.host=0.0.0.0")
  assert setup.placement_options(cfg, cfg.model_a.name) == {
      "host": "0.0.0.0", "tensor_parallel_size": 2, "env": (("CUDA_VISIBLE_DEVICES", "0,1"),)}
  assert setup.placement_options(cfg, cfg.model_b.name) == {"host": "0.0.0.0"}


@pytest.mark.parametrize("overrides, field", [
    (("vllm.gpus.model_a=(1, 1)",), "vllm.gpus.model_a"),
    (("jax_devices=(-1,)",), "jax_devices"),
    (("xla_mem_fraction=1.0",), "xla_mem_fraction"),
    (("vllm.host=",), "vllm.host"),
    (("distributed.num_processes=2",), "distributed.coordinator_address"),
    (("distributed.coordinator_address=node0:1234", "distributed.num_processes=2",
      "distributed.process_id=2"), "distributed.process_id"),
    (("distributed.coordinator_address=node0", "distributed.num_processes=2",
      "distributed.process_id=0"), "distributed.coordinator_address"),
    (("distributed.coordinator_address=node0:1234", "distributed.auto=True"),
     "distributed.auto"),
])
def test_bad_values_name_their_field(overrides, field):
  e = error_of(*overrides, preset="graft")
  assert field in str(e)


def test_sidecar_binds_where_asked_and_connects_over_loopback(tmp_path):
  from graft_jax.rollout.vllm_sidecar import SidecarOptions, VLLMSidecar
  server = VLLMSidecar(tmp_path, tmp_path, SidecarOptions(host="0.0.0.0"))
  cmd = server.command()
  assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
  assert server.url.startswith("http://127.0.0.1:")
  cmd = VLLMSidecar(tmp_path, tmp_path).command()
  assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
