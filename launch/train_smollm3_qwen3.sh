#!/usr/bin/env bash
# Paper pair smollm3_qwen3: GRAFT by default; pass a method preset as $1 (e.g. grpo16, hacpo, sgt, replay).
# Model folders and data paths are config fields; a run needs all four, e.g.
#   launch/train_smollm3_qwen3.sh graft --config.model_a.path=/models/A --config.model_b.path=/models/B \
#       --config.data.train_path=/data/math/train.jsonl --config.eval.data_dir=/data/math/eval
# (eval.data_dir holds math500.jsonl, aime24.jsonl, aime25.jsonl, amc23.jsonl, minerva.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
method=graft
if [[ $# -gt 0 && $1 != --* ]]; then method=$1; shift; fi
exec .venv/bin/python launch/train.py --config="configs/pair_smollm3_qwen3.py:${method}" "$@"
