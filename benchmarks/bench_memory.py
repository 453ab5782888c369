"""Peak bytes per device of the update, with and without remat and blocked attention, for a
4-layer slice of Qwen3-1.7B.

  .venv/bin/python benchmarks/bench_memory.py [--lengths=2048,6144] [--layers=4] [--attention_block=512]

Each configuration is compiled (no weights: nnx.eval_shape) for one device and
one row per micro-batch, and compiled.memory_analysis() read; nothing runs.
The numbers are XLA's CPU backend's (graft_jax.plan.memory).
"""

import _path  # noqa: F401  (the repository root on sys.path)

import dataclasses

import jax
from absl import app, flags

from graft_jax.models.config import ModelConfig
from graft_jax.sharding import MeshConfig, format_bytes, make_mesh
from graft_jax.plan.memory import update_memory
from graft_jax.config.run_config import OptimizerConfig
from graft_jax.train.methods.base import ClippedTokenLoss
from graft_jax.train.update import make_optimizer

_LENGTHS = flags.DEFINE_list("lengths", ["2048", "6144"], "padded row lengths (tokens)")
_LAYERS = flags.DEFINE_integer("layers", 4, "decoder layers of the Qwen3-1.7B-wide slice")
_BLOCK = flags.DEFINE_integer("attention_block", 512, "positions per block of blocked attention")


def main(_):
  full = ModelConfig.qwen3_1p7b()
  cfg = dataclasses.replace(full, num_layers=_LAYERS.value,
                            use_rope_layers=(1,) * _LAYERS.value)
  mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
  tx = make_optimizer(OptimizerConfig())
  print(f"Qwen3-1.7B width, {cfg.num_layers} layers, 1 row per micro-batch, fp32 params, "
        f"bf16 compute, backend {jax.default_backend()}")
  print(f"{'tokens':>7} {'remat':>6} {'scan':>5} {'attention':>10} {'temps':>11} {'peak':>11}")
  for length in map(int, _LENGTHS.value):
    for remat, scan, attention in (("none", False, "dense"), ("full", False, "dense"),
                                   ("full", True, "dense"), ("none", False, "blocked"),
                                   ("full", True, "blocked")):
      m = update_memory(cfg, mesh, tx, ClippedTokenLoss(), rows_per_device=1, length=length,
                        minibatch_rows=1, remat=remat, scan_layers=scan, attention=attention,
                        attention_block=_BLOCK.value, platform="cpu")
      print(f"{length:>7} {remat:>6} {str(scan):>5} {attention:>10} "
            f"{format_bytes(m.temporaries):>11} {format_bytes(m.total):>11}", flush=True)


if __name__ == "__main__":
  app.run(main)
