#!/usr/bin/env bash
# Paper pair qwen3_octothinker: GRAFT by default; pass a method preset as $1 (e.g. grpo16, hacpo, sgt, replay).
# Model folders and data paths are config fields, e.g.
#   launch/train_qwen3_octothinker.sh graft --config.model_a.path=/data/A --config.data.train_path=/data/math/train.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
method="${1:-graft}"; shift || true
exec .venv/bin/python launch/train.py --config="configs/pair_qwen3_octothinker.py:${method}" "$@"
