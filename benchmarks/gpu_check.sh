#!/usr/bin/env bash
# benchmarks/gpu_check.py on a GPU machine with no network, under its preinstalled
# python3 (JAX for CUDA, flax, optax, orbax, transformers): the pure-Python packages
# it lacks come from .whl/ (`make gpu-wheels` fills it on a machine with PyPI).
#   benchmarks/gpu_check.sh [--out=DIR] [--sections=env_decode,packed,pool,step]
# Each section runs in its own process under its own timeout and writes DIR/<section>.json
# (DIR: --out, else $OUT); DIR/gpu_check.jsonl has a line per section, its fate included.
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/graft_jax_site .whl/*.whl
  export PYTHONPATH="/tmp/graft_jax_site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
df -h /tmp . 2>/dev/null | tail -n +2 || true
export PYTHONUNBUFFERED=1
exec python3 benchmarks/gpu_check.py "$@"
