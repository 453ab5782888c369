#!/usr/bin/env bash
# GPU weight-sync check (NCCL, IPC, reload) with probe; see benchmarks/gpu_weight_sync.py.
# Needs .venv-gpu (jax[cuda12] + this package) and .venv-vllm-gpu (the GPU vllm==0.32.*);
# creates them when the network allows.
#   benchmarks/gpu_weight_sync.sh [--backends nccl,ipc,reload --layers 8 --repeats 3]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-gpu/bin/python ]; then
  python3 -m venv .venv-gpu
  .venv-gpu/bin/pip install -q "jax[cuda12]" -e .
fi
if [ ! -x .venv-vllm-gpu/bin/python ]; then
  python3 -m venv .venv-vllm-gpu
  .venv-vllm-gpu/bin/pip install -q "vllm==0.32.*"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
exec timeout 540 .venv-gpu/bin/python benchmarks/gpu_weight_sync.py "$@"
