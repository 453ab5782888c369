#!/usr/bin/env bash
# Paper pair smollm3_qwen3: GRAFT by default; pass a method preset as $1 (e.g. grpo16, hacpo, sgt, replay).
# Model folders and data paths are config fields, e.g.
#   launch/train_smollm3_qwen3.sh graft --config.model_a.path=/data/A --config.data.train_path=/data/math/train.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
method="${1:-graft}"; shift || true
exec .venv/bin/python launch/train.py --config="configs/pair_smollm3_qwen3.py:${method}" "$@"
