"""Evaluate one HF-format model folder on a benchmark suite (pass@1 / pass@k).

  .venv/bin/python launch/eval.py --model=/path/to/hf_model \
      --config=configs/benchmarks.py:/path/to/benchmark_dir \
      [--config.benchmarks.AIME24=/elsewhere/aime24.parquet] [--config.k=8]

Prints a table and writes `config.output` (json).
"""

from absl import app
from absl import flags
from ml_collections import config_flags

from graft_jax import data
from graft_jax import eval as eval_lib
from graft_jax import models
from graft_jax import rewards
from graft_jax.rollout import JaxSamplerEngine, SamplingParams

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/benchmarks.py", "benchmark suite config", lock_config=True)
_MODEL = flags.DEFINE_string("model", None, "local HF model folder", required=True)


def main(argv):
  del argv
  cfg = _CONFIG.value
  # Check every benchmark file before spending minutes loading the model.
  suite_paths = data.ordered(dict(cfg.benchmarks))
  suite, _ = data.load_suite(suite_paths, skip_malformed=cfg.skip_malformed,
                             limit=cfg.limit or None)
  model, _ = models.load_hf(_MODEL.value)
  tokenizer = models.load_tokenizer(_MODEL.value)
  engine = JaxSamplerEngine(model, eos_ids=tokenizer.eos_token_id,
                            pad_id=tokenizer.pad_token_id)
  sampling = SamplingParams(max_new_tokens=cfg.max_new_tokens,
                            temperature=cfg.temperature, top_p=cfg.top_p,
                            seed=cfg.seed)
  with rewards.VerifierPool() as pool:
    report = eval_lib.evaluate(
        engine, tokenizer, suite, k=cfg.k, sampling=sampling,
        template=data.PromptTemplate.named(cfg.template),
        batch_size=cfg.batch_size, pool=pool, timeout_s=cfg.timeout_s)
  print(report.table())
  report.write_json(cfg.output)
  print(f"wrote {cfg.output}")


if __name__ == "__main__":
  app.run(main)
