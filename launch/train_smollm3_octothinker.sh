#!/usr/bin/env bash
# Paper pair smollm3_octothinker: GRAFT by default; pass a method preset as $1 (e.g. grpo16, hacpo, sgt, replay).
# Each model is a local folder or a Hub id (--config.model_a.path=..., model_a.revision pins a
# commit); the data is read from data/math/train.jsonl and data/eval/ as
# launch/prepare_data.py writes them (override data.train_path and eval.data_dir), e.g.
#   launch/train_smollm3_octothinker.sh graft --config.model_a.path=/models/A --config.model_b.path=org/model-b
set -euo pipefail
cd "$(dirname "$0")/.."
method=graft
if [[ $# -gt 0 && $1 != --* ]]; then method=$1; shift; fi
exec .venv/bin/python launch/train.py --config="configs/pair_smollm3_octothinker.py:${method}" "$@"
