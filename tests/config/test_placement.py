"""Placement configs: where vLLM servers and the trainer go, and how processes start.

Every impossible placement is one ``ConfigError`` whose message names the
fields to change; the sidecar options built from a good one carry
``CUDA_VISIBLE_DEVICES``, the tensor-parallel size and the bind address.
"""

import pytest

from configs import toy
from graft_jax.config import run_config as config_lib
from graft_jax.rollout import vllm_setup
from graft_jax.train import setup
from graft_jax.config import placement as config_placement
from graft_jax.config.load import apply_overrides


def cfg_of(*overrides, preset="vllm"):
  cd = toy.get_config(preset)
  cd.unlock()
  apply_overrides(cd, list(overrides))
  return config_lib.from_config_dict(cd)


def error_of(*overrides, preset="vllm") -> config_lib.ConfigError:
  with pytest.raises(config_lib.ConfigError) as e:
    cfg_of(*overrides, preset=preset)
  return e.value


def test_a_server_beside_the_trainer_leaves_it_the_rest_of_the_gpu():
  # Colocated: the trainer's share is what the servers leave, less the headroom.
  cfg = cfg_of("vllm.gpus.model_a=(0,)", "vllm.gpus.model_b=(1,)",
               "vllm.gpu_memory_utilization=0.4")
  assert config_placement.trainer_fraction(cfg) == pytest.approx(1 - 0.4 - 0.05)
  cfg = cfg_of("vllm.gpus.model_a=(0,)", "vllm.gpus.model_b=(0,)",
               "vllm.gpu_memory_utilization=0.3")
  assert config_placement.trainer_fraction(cfg) == pytest.approx(1 - 0.6 - 0.05)
  # On GPUs of its own (or with the JAX engine) the trainer takes 0.9, not JAX's 0.75.
  cfg = cfg_of("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(3,)", "jax_devices=(0, 1)")
  assert config_placement.trainer_fraction(cfg) == 0.9
  assert config_placement.trainer_fraction(cfg_of(preset="graft")) == 0.9
  assert config_placement.trainer_fraction(cfg_of("xla_mem_fraction=0.5")) == 0.5


def test_servers_that_leave_the_trainer_too_little_name_the_fields():
  e = error_of("vllm.gpus.model_a=(0, 1)", "vllm.gpus.model_b=(0,)",
               "vllm.gpu_memory_utilization=0.45")
  msg = str(e)
  for field in ("vllm.gpus.model_a=(0, 1) and vllm.gpus.model_b=(0,)", "jax_devices=()",
                "GPU 0", "leaves the trainer 0.05", "xla_mem_fraction"):
    assert field in msg, msg
  assert e.field == "vllm.gpus.model_a" and "\n" not in msg
  e = error_of("vllm.gpus.model_b=(3,)", "vllm.gpus.model_a=(3,)", "jax_devices=(2, 3)",
               "vllm.gpu_memory_utilization=0.45")
  assert "jax_devices=(2, 3) share GPU 3" in str(e)


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
  assert vllm_setup.placement_options(cfg, cfg.vllm.gpus.model_a) == {
      "host": "0.0.0.0", "tensor_parallel_size": 2, "env": (("CUDA_VISIBLE_DEVICES", "0,1"),)}
  assert vllm_setup.placement_options(cfg, cfg.vllm.gpus.model_b) == {"host": "0.0.0.0"}


@pytest.mark.parametrize("overrides, field", [
    (("vllm.gpus.model_a=(1, 1)",), "vllm.gpus.model_a"),
    (("jax_devices=(-1,)",), "jax_devices"),
    (("xla_mem_fraction=1.0",), "xla_mem_fraction"),
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


def test_sidecar_binds_tcp_only_when_asked_and_connects_over_loopback(tmp_path):
  from graft_jax.rollout.vllm_sidecar import SidecarOptions, VLLMSidecar
  server = VLLMSidecar(tmp_path, tmp_path, SidecarOptions(host="0.0.0.0"))
  cmd = server.command()
  assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
  assert server.url.startswith("http://127.0.0.1:")
  cmd = VLLMSidecar(tmp_path, tmp_path).command()
  assert "--host" not in cmd and "--port" not in cmd and "--uds" in cmd


@pytest.mark.parametrize("overrides, on_gpu, processes, want", [
    (("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(3,)", "jax_devices=(0, 1)"), True, 1, "nccl"),
    (("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(3,)", "jax_devices=(0, 1)"), True, 4, "nccl"),
    (("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(3,)", "jax_devices=(0, 1)"), False, 1,
     "reload"),  # CPUs
    (("vllm.gpus.model_a=(2,)",), True, 1, "reload"),  # model_b unplaced
    (("vllm.gpus.model_a=(1,)", "vllm.gpus.model_b=(1,)", "jax_devices=(1, 2)"), True, 1, "ipc"),
    (("vllm.gpus.model_a=(1,)", "vllm.gpus.model_b=(1,)", "jax_devices=(1, 2)"), True, 2,
     "reload"),  # IPC needs the one process on the server's GPU
    # Each server by its own: IPC on the sender's GPU 0, NCCL on GPU 3.
    (("vllm.gpus.model_a=(0,)", "vllm.gpus.model_b=(3,)"), True, 1, "nccl"),
    (("vllm.gpus.model_a=(0,)", "vllm.gpus.model_b=(3,)"), True, 2, "reload"),
    (("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(3,)", "jax_devices=(0, 1)",
      "vllm.weight_sync=reload"), True, 1, "reload"),  # asked for
])
def test_auto_weight_sync_follows_the_placement(overrides, on_gpu, processes, want):
  cfg = cfg_of(*overrides)
  assert cfg.vllm.weight_sync in ("auto", "reload")
  assert config_placement.sync_backend(cfg, on_gpu=on_gpu, processes=processes) == want
  assert config_placement.sync_backend(cfg_of(*overrides, preset="graft"), on_gpu=on_gpu) == (
      "reload" if cfg.vllm.weight_sync == "auto" else cfg.vllm.weight_sync)


_GIB = 2**30
_FOUR = ("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(3,)", "jax_devices=(0, 1)",
         "vllm.gpu_memory_utilization=0.9")


def _feet(a_params=3 * 10**9, b_params=2 * 10**9):
  return [config_placement.Footprint("toy_a", a_params, 12, 2),
          config_placement.Footprint("toy_b", b_params, 12, 2)]


def _start_error(*overrides, gpus=4, device_bytes=141 * 10**9, feet=None):
  cfg = cfg_of(*overrides)
  with pytest.raises(config_lib.ConfigError) as e:
    config_placement.check_start(cfg, gpus=gpus, device_bytes=device_bytes,
                                 footprints=feet or _feet())
  assert "\n" not in str(e.value)
  return e.value


def test_start_check_passes_a_fitting_placement_and_skips_cpus():
  cfg = cfg_of(*_FOUR, "mesh.fsdp=-1", "mesh.data=1")
  config_placement.check_start(cfg, gpus=4, device_bytes=141 * 10**9, footprints=_feet())
  # No GPUs (a CPU run): nothing is placed, whatever the fields say.
  config_placement.check_start(cfg_of("vllm.gpus.model_a=(7,)"), gpus=None, device_bytes=None,
                               footprints=_feet())


def test_start_check_names_gpus_the_node_lacks():
  e = _start_error("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(5,)", "jax_devices=(0, 1)")
  assert e.field == "vllm.gpus.model_b" and "shows 4 GPU(s)" in str(e) and "GPU 5" in str(e)
  e = _start_error("jax_devices=(0, 4)", "vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(3,)")
  assert e.field == "jax_devices"


def test_start_check_wants_every_server_placed_on_gpus():
  e = _start_error("vllm.gpus.model_a=(3,)", "jax_devices=(0, 1, 2)")
  assert e.field == "vllm.gpus.model_b" and "land on GPU 0" in str(e)
  assert "vllm.gpus.model_b=(3,)" in str(e)  # a fix: the node's last GPU


def test_start_check_weighs_the_resident_states():
  # 12 bytes per parameter of 5e9 parameters = 60 GB, over fsdp=2 GPUs: 30 GB + 4 GiB each
  # fits 0.9 x 141 GB, but not 0.9 x 30 GB; replicated (fsdp=1) it needs 60 GB + 4 GiB.
  ok = (*_FOUR, "mesh.fsdp=2", "mesh.data=1")
  config_placement.check_start(cfg_of(*ok), gpus=4, device_bytes=141 * 10**9, footprints=_feet())
  e = _start_error(*ok, device_bytes=30 * 10**9)
  assert e.field == "jax_devices" and "31.9 GiB per trainer GPU" in str(e)
  e = _start_error(*_FOUR, "mesh.fsdp=1", "mesh.data=-1", device_bytes=70 * 10**9)
  assert "59.9 GiB per trainer GPU" in str(e) and "0.9 x 65 GiB" in str(e)


def test_start_check_weighs_each_servers_weights():
  # model_a: 30e9 bf16 parameters = 60 GB on one GPU of 0.9 x 60 GB
  e = _start_error(*_FOUR, "mesh.fsdp=2", "mesh.data=1", device_bytes=60 * 10**9,
                   feet=[config_placement.Footprint("toy_a", 30 * 10**9, 0, 2),
                         config_placement.Footprint("toy_b", 10**9, 0, 2)])
  assert e.field == "vllm.gpu_memory_utilization"
  assert "toy_a's served weights take 55.9 GiB per GPU of vllm.gpus.model_a=(2,)" in str(e)


def test_visible_gpus_read_cuda_visible_devices_then_the_driver(tmp_path):
  assert config_placement.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, tmp_path) == 2
  assert config_placement.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, tmp_path) == 0
  assert config_placement.visible_gpus({}, tmp_path / "absent") is None
  for i in range(4):
    (tmp_path / f"0000:0{i}:00.0").mkdir()
  assert config_placement.visible_gpus({}, tmp_path) == 4


def test_gpu_ids_index_into_the_inherited_cuda_visible_devices(monkeypatch):
  # A job given GPUs 4-7 calls them 0-3; its servers must land on 4-7.
  cfg = cfg_of("vllm.gpus.model_a=(0, 1)", "vllm.gpus.model_b=(3,)", "jax_devices=(2,)")
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
  assert vllm_setup.placement_options(cfg, cfg.vllm.gpus.model_a)["env"] == (
      ("CUDA_VISIBLE_DEVICES", "4,5"),)
  assert vllm_setup.placement_options(cfg, cfg.vllm.gpus.model_b)["env"] == (
      ("CUDA_VISIBLE_DEVICES", "7"),)
  uuids = {"CUDA_VISIBLE_DEVICES": "GPU-aa, GPU-bb"}
  assert config_placement.physical_gpus((1,), uuids) == ("GPU-bb",)
  assert config_placement.physical_gpus((1, 2), {}) == ("1", "2")  # unset: the driver's ids


def test_the_run_stops_on_a_bad_placement_before_any_model_loads(monkeypatch, tmp_path):
  # The model folders do not exist: the placement check must stop the run first.
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
  # setenv first so that teardown also removes what the launcher sets below; a bare
  # delenv of an absent name records nothing, and the value would leak into later tests.
  monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "")
  monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION")
  cfg = cfg_of("vllm.gpus.model_a=(1,)", "vllm.gpus.model_b=(3,)", "xla_mem_fraction=0.5",
               f"workdir={tmp_path}/run", f"model_a.path={tmp_path}/none_a",
               f"model_b.path={tmp_path}/none_b")
  with pytest.raises(config_lib.ConfigError) as e:
    setup.build_trainer(cfg)
  assert e.value.field == "vllm.gpus.model_b" and "shows 2 GPU(s)" in str(e.value)
  assert not (tmp_path / "run").exists()  # stopped before the workdir was touched
  import os
  assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5"  # the launcher set it


def test_replicas_split_each_models_gpus_and_each_takes_its_own_sync():
  four = ("vllm.gpus.model_a=(0, 1, 2, 3)", "vllm.gpus.model_b=(0, 1, 2, 3)",
          "vllm.data_parallel=4", "vllm.gpu_memory_utilization=0.25")
  cfg = cfg_of(*four)
  assert config_placement.replica_gpus(cfg.vllm.gpus.model_a, 4) == [(0,), (1,), (2,), (3,)]
  assert config_placement.replica_gpus((), 2) == [(), ()]
  assert config_placement.trainer_fraction(cfg) == pytest.approx(1 - 0.5 - 0.05)
  sync = lambda gpus, processes=1: config_placement.sync_backend(
      cfg, on_gpu=True, processes=processes, gpus=gpus)
  assert [sync(g) for g in ((0,), (1,), (3,))] == ["ipc", "nccl", "nccl"]
  assert sync((0,), processes=2) == "reload"
  assert config_placement.sync_backend(cfg, on_gpu=True) == "nccl"
  assert "vllm.data_parallel=2 servers" in str(error_of("vllm.gpus.model_a=(0, 1, 2)",
                                                       "vllm.data_parallel=2"))
  assert error_of(*four, "distributed.coordinator_address=node0:1234",
                  "distributed.num_processes=2", "distributed.process_id=0"
                  ).field == "vllm.data_parallel"
  assert error_of("vllm.data_parallel=0").field == "vllm.data_parallel"
  # Each server holds all its weights: 4 x 4e9 bf16 parameters of 0.25 x 30 GB do not fit.
  with pytest.raises(config_lib.ConfigError) as e:
    config_placement.check_start(cfg, gpus=4, device_bytes=30 * 10**9, footprints=[
        config_placement.Footprint("toy_a", 4 * 10**9, 0, 2),
        config_placement.Footprint("toy_b", 10**6, 0, 2)])
  assert "toy_a's served weights take 7.5 GiB per GPU" in str(e.value)
