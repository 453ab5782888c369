"""The GPU venvs' one NCCL (requirements/gpu-nccl.lock): read offline, against what
pyproject.toml and the Makefile install, so a vLLM or JAX bump without a new lock, or
a pin that one side's packages refuse, fails here rather than in a run's preflight."""

import pathlib
import re
import tomllib

from packaging.specifiers import SpecifierSet

from scripts import gpu_lock

REPO = pathlib.Path(__file__).resolve().parents[2]


def lock_of(text: str) -> tuple[list[list[str]], dict[str, str]]:
  """The lock's provenance rows and its pins (wheel -> version)."""
  rows = [line[3:].split() for line in text.splitlines() if line.startswith("#: ")]
  pins = dict(line.split("==") for line in text.splitlines()
              if line and not line.startswith("#"))
  return rows, pins


def makefile_var(name: str, text: str) -> str:
  return re.search(rf"^{name} := (\S+)$", text, re.M).group(1)


def test_the_lock_names_what_pyproject_and_the_makefile_install():
  rows, _ = lock_of((REPO / "requirements/gpu-nccl.lock").read_text())
  extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
  extras = extras["optional-dependencies"]
  vllm = makefile_var("VLLM_GPU_PKG", (REPO / "Makefile").read_text())
  assert {r[0]: r[1] for r in rows} == {"trainer-cuda13": extras["cuda13"][0],
                                        "trainer-cuda12": extras["cuda12"][0], "vllm": vllm}


def test_both_gpu_venvs_resolve_to_one_nccl_version_each_side_accepts():
  rows, pins = lock_of((REPO / "requirements/gpu-nccl.lock").read_text())
  assert len(set(pins.values())) == 1, pins  # cu12 and cu13 builds of one version
  for side, _, wheel, by, requirement, alone, _ in rows:
    assert pins[wheel] in SpecifierSet(requirement), (side, by, requirement, pins[wheel])
  # The version is the one vLLM's torch resolves to on its own: its NCCL stays its own.
  vllm = next(r for r in rows if r[0] == "vllm")
  assert pins[vllm[2]] == vllm[5]


def test_the_makefile_installs_both_gpu_venvs_under_the_lock():
  make = (REPO / "Makefile").read_text()
  lock = makefile_var("GPU_LOCK", make)
  assert (REPO / lock).is_file()
  for stamp, installs in (("GPU_STAMP", "-e '.[cuda$(CUDA)]'"),
                          ("VLLM_GPU_STAMP", "$(VLLM_GPU_PKG)")):
    recipe = make.split(f"\n$({stamp}):")[1].split("\n\n")[0]
    assert "$(GPU_LOCK)" in recipe.splitlines()[0]  # a new lock rebuilds the venv
    assert f"pip install -q {installs} -c $(GPU_LOCK)" in recipe
  rows, _ = lock_of((REPO / lock).read_text())
  assert makefile_var("VLLM_GPU_CUDA", make) == next(r for r in rows if r[0] == "vllm")[6]


def test_a_row_names_the_packages_whose_pin_binds_and_the_lock_takes_vllms():
  """An extra that pip did not choose pins another version: not a binding pin."""
  nccl = {"name": "nvidia-nccl-cu13", "version": "2.29.7"}
  torch = {"name": "torch", "version": "2.13.0", "requires_dist": [
      'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',
      'cuda-toolkit[cublas]==13.0.3; platform_system == "Linux"']}
  ext = {"name": "nccl-extensions", "version": "0.1.0",
         "requires_dist": ['nvidia-nccl-cu13==2.30.7; extra == "cu13"', "nccl4py"]}
  loose = {"name": "nccl4py", "version": "0.6.0",
           "requires_dist": ['nvidia-nccl-cu13; extra == "cu13"']}
  row = gpu_lock.nccl_row("vllm", "vllm==0.32.0", [torch, ext, loose, nccl])
  assert row == ["vllm", "vllm==0.32.0", "nvidia-nccl-cu13", "torch==2.13.0", "==2.29.7",
                 "2.29.7", "13"]
  jax = ["trainer-cuda12", "jax[cuda12]", "nvidia-nccl-cu12", "p==1", ">=2.18.1", "2.32.3",
         "-"]
  rows, pins = lock_of(gpu_lock.render([jax, row]))
  assert rows == [jax, row]
  assert pins == {"nvidia-nccl-cu12": "2.29.7", "nvidia-nccl-cu13": "2.29.7"}
