"""The evaluation suite: benchmark names -> local files, and eval sampling.

Usage: ``--config=configs/benchmarks.py`` (files under ./data/eval, where
``launch/prepare_data.py`` writes them) or
``--config=configs/benchmarks.py:/my/dir``; override one file with
``--config.benchmarks.AIME24=/elsewhere/aime24.parquet``. Files are MATH-format
jsonl/json/parquet (see graft_jax/data/loaders.py). Settings are the paper's:
T=0.6, top-p 0.95, k=8 samples, pass@1 averaged over the five benchmarks.
"""

import ml_collections

from graft_jax.config.run_config import PerfConfig

DEFAULT_ROOT = "data/eval"
FILES = {
    "MATH500": "math500.jsonl",
    "AIME24": "aime24.jsonl",
    "AIME25": "aime25.jsonl",
    "AMC23": "amc23.jsonl",
    "Minerva": "minerva.jsonl",
}


def get_config(root: str | None = None) -> ml_collections.ConfigDict:
  root = (root or DEFAULT_ROOT).rstrip("/")
  config = ml_collections.ConfigDict()
  config.benchmarks = ml_collections.ConfigDict(
      {name: f"{root}/{fname}" for name, fname in FILES.items()})
  config.k = 8
  config.temperature = 0.6
  config.top_p = 0.95
  config.max_new_tokens = 4096
  config.seed = 0
  config.batch_size = 64           # prompts per engine call
  config.template = "paper"        # a name in graft_jax.data.prompts.TEMPLATES
  config.timeout_s = 5.0           # per-answer verification budget
  config.skip_malformed = False
  config.limit = 0                 # problems per benchmark; 0 = all
  config.output = "eval_results.json"
  config.compile_cache_dir = PerfConfig.compile_cache_dir  # graft_jax.compile_cache; "" = off
  return ml_collections.ConfigDict(config, type_safe=True)
