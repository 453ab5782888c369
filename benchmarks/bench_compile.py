"""Compile time of the update against depth: layers under nnx.scan vs an unrolled loop.

  .venv/bin/python benchmarks/bench_compile.py [--layers=4,16,28] [--length=512]

A narrow Qwen3-architecture model (hidden 256, 4 heads / 2 KV heads, head_dim 64,
vocabulary 8,192, remat on every block) is built abstractly (no weights), and the
update that training runs (its micro-batch gradient program and its optimizer step,
graft_jax.train.update.update_program) is lowered and compiled for one CPU device,
one row of --length tokens; lowering and XLA compilation are timed apart, each the
sum over the two programs. Each configuration is a fresh jit, so nothing is cached
(no persistent compilation cache is configured). A script, not a test: wall times.
"""

import dataclasses
import time

import jax
import jax.numpy as jnp
from absl import app, flags

from graft_jax.models.config import ModelConfig
from graft_jax.plan.memory import abstract_model
from graft_jax.config.run_config import OptimizerConfig
from graft_jax.train.methods.base import ClippedTokenLoss
from graft_jax.train.update import make_optimizer, update_program

_LAYERS = flags.DEFINE_list("layers", ["4", "16", "28"], "decoder depths to compile")
_LENGTH = flags.DEFINE_integer("length", 512, "tokens per row")
_ATTENTION = flags.DEFINE_enum("attention", "blocked", ["dense", "blocked"], "attention_impl")


def narrow(layers: int) -> ModelConfig:
  return dataclasses.replace(ModelConfig.qwen3_1p7b(), vocab_size=8192, hidden_size=256,
                             intermediate_size=768, num_heads=4, num_kv_heads=2, head_dim=64,
                             num_layers=layers, use_rope_layers=(1,) * layers)


def main(_):
  tx = make_optimizer(OptimizerConfig())
  print(f"narrow Qwen3 (hidden 256), 1 row x {_LENGTH.value} tokens, remat full, "
        f"{_ATTENTION.value} attention, backend {jax.default_backend()}")
  print(f"{'layers':>6} {'layers as':>10} {'lower s':>8} {'compile s':>10}")
  for layers in map(int, _LAYERS.value):
    for scan in (True, False):
      graphdef, params = abstract_model(narrow(layers), param_dtype=jnp.float32,
                                        dtype=jnp.bfloat16, remat="full", scan_layers=scan,
                                        attention=_ATTENTION.value, attention_block=128)
      t0 = time.perf_counter()
      programs = update_program(graphdef, params, tx, ClippedTokenLoss(), rows=1,
                                length=_LENGTH.value)
      lowered = [fn.lower(*args) for fn, args in programs]
      t1 = time.perf_counter()
      for program in lowered:
        program.compile()
      t2 = time.perf_counter()
      print(f"{layers:>6} {'scan' if scan else 'unrolled':>10} {t1 - t0:>8.2f} {t2 - t1:>10.2f}",
            flush=True)


if __name__ == "__main__":
  app.run(main)
