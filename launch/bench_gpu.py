"""Update throughput of a randomly initialised Qwen3-1.7B at 6k tokens on one GPU (launch/bench_gpu.sh).

Prints tokens/s, MFU against the device's bf16 peak, and the measured peak
memory next to the plan's prediction (memory_analysis of the same program).
"""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.sharding import MeshConfig, format_bytes, make_mesh
from graft_jax.sharding.memory_plan import update_memory
from graft_jax.train.config import OptimizerConfig
from graft_jax.train.microbatch import accumulated_update
from graft_jax.train.update import LossSpec, make_optimizer

_TOKENS = flags.DEFINE_integer("tokens", 6144, "padded row length")
_ROWS = flags.DEFINE_integer("rows", 1, "rows per micro-batch")
_MICRO = flags.DEFINE_integer("micro_batches", 4, "micro-batches per optimizer step")
_STEPS = flags.DEFINE_integer("steps", 5, "timed steps after one warm-up")
_PEAK = flags.DEFINE_float("peak_tflops", 989.0, "dense bf16 peak of the device (H200: 989)")
_REMAT = flags.DEFINE_string("remat", "full", "remat policy")
_ATTENTION = flags.DEFINE_enum("attention", "fused", ["dense", "blocked", "fused"],
                                "attention_impl ('fused': cuDNN's kernel on the GPU)")
_LAYERS = flags.DEFINE_integer("layers", 0, "keep only this many layers (0: all 28; a CPU smoke run)")


def model_flops_per_token(cfg: ModelConfig, t: int) -> float:
  """6 N (forward + backward of the matmuls) + causal attention's 6 L T d_attn (half of 12)."""
  n = (cfg.num_layers * (cfg.hidden_size * cfg.head_dim * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
                         + 3 * cfg.hidden_size * cfg.intermediate_size)
       + cfg.vocab_size * cfg.hidden_size)
  return 6.0 * n + 6.0 * cfg.num_layers * t * cfg.num_heads * cfg.head_dim


def main(_):
  cfg, t, r, m = ModelConfig.qwen3_1p7b(), _TOKENS.value, _ROWS.value, _MICRO.value
  if _LAYERS.value:
    cfg = dataclasses.replace(cfg, num_layers=_LAYERS.value, use_rope_layers=(1,) * _LAYERS.value)
  mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
  tx, spec = make_optimizer(OptimizerConfig(lr=1e-6)), LossSpec()
  # The plan is compiled here too; with 'fused' it is predicted by the blocked path
  # (no T x T scores either), since the memory analysis cannot see cuDNN's kernel.
  predicted = update_memory(cfg, mesh, tx, spec, rows_per_device=r, length=t,
                            minibatch_rows=r * m, remat=_REMAT.value, scan_layers=True,
                            attention="blocked" if _ATTENTION.value == "fused" else _ATTENTION.value)
  model = init_model(cfg, param_dtype=jnp.float32, dtype=jnp.bfloat16)
  model.set_memory_options(remat=_REMAT.value, scan_layers=True, attention=_ATTENTION.value)
  graphdef, params = nnx.split(model)
  opt_state = jax.jit(tx.init)(params)
  rng = np.random.default_rng(0)
  micro = {"ids": rng.integers(0, cfg.vocab_size, (m, r, t)).astype(np.int32),
           "attn": np.ones((m, r, t), bool), "resp_mask": np.ones((m, r, t), np.float32),
           "old_logp": np.full((m, r, t), -2.0, np.float32), "ref_logp": np.zeros((m, r, t), np.float32),
           "adv": rng.normal(size=(m, r)).astype(np.float32), "weight": np.ones((m, r), np.float32),
           "grafted": np.zeros((m, r), np.float32), "ppo": np.ones((m, r), np.float32),
           "sgt": np.zeros((m, r), np.float32), "is_self": np.ones((m, r), bool),
           "src_mean_logp": np.zeros((m, r), np.float32), "cap_ratio": np.ones((m, r), np.float32),
           "share": np.full(m, 1 / m, np.float32), "num_tokens": np.full(m, m * r * t, np.float32),
           "num_sgt_tokens": np.zeros(m, np.float32), "num_rows": np.full(m, m * r, np.float32)}
  micro = jax.device_put(micro)
  step = jax.jit(lambda p, o, b: accumulated_update(p, o, b, 0, graphdef=graphdef, tx=tx,
                                                      spec=spec), donate_argnums=(0, 1))
  t0 = time.perf_counter()
  params, opt_state, out = step(params, opt_state, micro)
  jax.block_until_ready(out)
  print(f"compile + first step: {time.perf_counter() - t0:.1f} s, loss {float(out['loss']):.4f}")
  t0 = time.perf_counter()
  for _ in range(_STEPS.value):
    params, opt_state, out = step(params, opt_state, micro)
  jax.block_until_ready(out)
  dt = (time.perf_counter() - t0) / _STEPS.value
  tokens_s = m * r * t / dt
  mfu = tokens_s * model_flops_per_token(cfg, t) / (_PEAK.value * 1e12)
  stats = jax.devices()[0].memory_stats() or {}
  print(f"{jax.devices()[0].device_kind}: {t} tokens x {r} rows x {m} micro-batches, "
        f"remat {_REMAT.value}: {dt:.2f} s/step, {tokens_s:,.0f} tokens/s, MFU {100 * mfu:.1f}%")
  print(f"peak memory {format_bytes(stats.get('peak_bytes_in_use', 0))}, "
        f"plan (memory_analysis) {format_bytes(predicted.total)}")


if __name__ == "__main__":
  app.run(main)
