"""Evaluate one HF-format model folder (or Hub id) on a benchmark suite (pass@1 / pass@k).

  .venv/bin/python launch/eval.py --model=/path/to/hf_model \
      --config=configs/benchmarks.py:/path/to/benchmark_dir \
      [--config.benchmarks.AIME24=/elsewhere/aime24.parquet] [--config.k=8] [--verbose]

Prints a table and writes `config.output` (json). The model folder, the
output's folder and every benchmark file are checked before the model loads.
"""

import pathlib

from absl import flags

from graft_jax import cli
from graft_jax.config import checks as config_checks

_MODEL = flags.DEFINE_string("model", None, "local HF model folder, or a Hub id (org/name)",
                             required=True)


def main(cfg):
  from graft_jax.models import hub  # a Hub id: its folder in the Hugging Face cache
  folder = hub.resolve_field("--model", _MODEL.value).folder
  config_checks.check_model_folder("--model", folder)
  config_checks.check_writable("output", str(pathlib.Path(cfg.output).absolute().parent))
  # JAX: after the checks.
  from graft_jax import compile_cache, data, eval as eval_lib, models, rewards
  from graft_jax.rollout import JaxSamplerEngine, SamplingParams

  suite, _ = data.load_suite(data.ordered(dict(cfg.benchmarks)),
                             skip_malformed=cfg.skip_malformed, limit=cfg.limit or None)
  compile_cache.enable(cfg.compile_cache_dir)  # other checkpoints of a run share its programs
  model, _ = models.load_hf(folder)
  tokenizer = models.load_tokenizer(folder)
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
  cli.run(main, default_config="configs/benchmarks.py",
          config_help="benchmark suite, configs/benchmarks.py[:benchmark_dir]")
