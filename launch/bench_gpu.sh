#!/usr/bin/env bash
# The update of a random Qwen3-1.7B at 6k tokens on one GPU: tokens/s, MFU, peak memory vs
# the plan. Installs what it needs into .venv-gpu (jax[cuda12] and this package) first.
#   launch/bench_gpu.sh [--tokens=6144 --rows=1 --micro_batches=4 --steps=5]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-gpu/bin/python ]; then
  python3 -m venv .venv-gpu
  .venv-gpu/bin/pip install -q --upgrade pip
  .venv-gpu/bin/pip install -q "jax[cuda12]" -e .
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
exec timeout 540 .venv-gpu/bin/python launch/bench_gpu.py "$@"
