"""GPU check of weight sync through vLLM's weight-transfer API (NCCL, CUDA IPC) vs reload.

For each backend: start a vLLM server (GPU build) on a random Qwen3-architecture
model through `VLLMEngine`, push other random weights `--repeats` times, check
the log-prob probe after every push (server vs JAX, `WeightSyncError` on a
mismatch) and print seconds per GB. Exits non-zero on any failure. NCCL needs
two GPUs (NCCL refuses two ranks on one device): the server gets GPU 1, the
trainer GPU 0; on one GPU the NCCL run prints SKIPPED and the exit code says so.
IPC and reload put the server beside the trainer on GPU 0, memory split.

  benchmarks/gpu_weight_sync.sh [--backends nccl,ipc,reload --layers 8 --hidden 1024 --repeats 3]
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.3")  # vLLM gets 0.3 beside it

import argparse  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from graft_jax.models import ModelConfig, init_model  # noqa: E402
from graft_jax.rollout import vllm_sync  # noqa: E402
from graft_jax.rollout.vllm_engine import VLLMEngine  # noqa: E402
from graft_jax.rollout.vllm_sidecar import SidecarOptions  # noqa: E402

SKIPPED = 3  # exit code: nothing failed, but a backend could not run here


def random_model(cfg: ModelConfig, seed: int):
  """Weights ~ 0.1 N(0, 1), norm gains ~ 1 + 0.2 N(0, 1): peaked next-token
  distributions, so two seeds' log-probs differ by far more than bf16 rounding."""
  graphdef, state = nnx.split(init_model(cfg, rngs=nnx.Rngs(seed)))
  keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(state))))
  def redraw(x):
    noise = jax.random.normal(next(keys), x.shape, x.dtype)
    return 1.0 + 0.2 * noise if bool((x == 1.0).all()) else 0.1 * noise
  return nnx.merge(graphdef, jax.tree.map(redraw, state))


def run(backend: str, models, args, root: pathlib.Path) -> dict:
  gpu = "1" if backend == "nccl" else "0"
  options = SidecarOptions(python=args.vllm_python, dtype="bfloat16", max_model_len=256,
                           gpu_memory_utilization=0.3, env=(("CUDA_VISIBLE_DEVICES", gpu),))
  with VLLMEngine(models[0], eos_ids=1, pad_id=0, run_dir=root / backend, options=options,
                  name=f"probe-{backend}", check_every=1, weight_sync=backend) as engine:
    engine.sidecar.wait_ready()
    seconds, gaps, nbytes = [], [], 0.0
    for r in range(args.repeats + 1):  # the first push compiles the casts: not timed
      engine.set_weights(models[(r + 1) % 2])  # probes, raises WeightSyncError on a gap
      m = engine.last_sync_metrics
      gaps.append(m["vllm_probe_mean_abs"])
      if r:
        seconds.append(m.get("vllm_push_s", m.get("vllm_write_s", 0) + m.get("vllm_reload_s", 0)))
        nbytes = m.get("vllm_push_bytes", nbytes)
  return {"s": statistics.median(seconds), "bytes": nbytes, "gap": max(gaps)}


def main() -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("--backends", default="nccl,ipc,reload")
  ap.add_argument("--layers", type=int, default=8)
  ap.add_argument("--hidden", type=int, default=1024)
  ap.add_argument("--vocab", type=int, default=32000)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--vllm-python", default=".venv-vllm-gpu/bin/python")
  args = ap.parse_args()
  print(f"devices: {jax.devices()}", flush=True)
  cfg = ModelConfig(model_type="qwen3", vocab_size=args.vocab, hidden_size=args.hidden,
                    intermediate_size=3 * args.hidden, num_layers=args.layers, num_heads=8,
                    num_kv_heads=4, head_dim=128, qk_norm=True, max_position_embeddings=512,
                    eos_token_ids=(1,))
  models = [random_model(cfg, 0), random_model(cfg, 1)]
  ids = vllm_sync.probe_ids(cfg.vocab_size)
  apart = float(np.abs(vllm_sync.jax_probe_logprobs(models[0], ids)
                       - vllm_sync.jax_probe_logprobs(models[1], ids)).mean())
  print(f"probe gap between the two weight sets (JAX only): {apart:.3f}", flush=True)
  if apart < 1.0:  # 4x the bf16 tolerance (0.25): else a failed push could pass the probe
    print("FAIL: the two weight sets are too close for the probe to tell them apart")
    return 1
  status = 0
  with tempfile.TemporaryDirectory() as tmp:
    for backend in args.backends.split(","):
      if backend == "nccl" and len(jax.devices("gpu")) < 2:
        print("nccl: SKIPPED (needs 2 GPUs: NCCL refuses two ranks on one device)", flush=True)
        status = status or SKIPPED
        continue
      r = run(backend, models, args, pathlib.Path(tmp))
      print(f"{backend}: {r['bytes'] / 1e9:.3f} GB/push, {r['s']:.3f} s/push, "
            f"{r['s'] / max(r['bytes'], 1) * 1e9:.3f} s/GB, worst probe gap {r['gap']:.4f} "
            f"(tolerance 0.25): PASS", flush=True)
  return status


if __name__ == "__main__":
  sys.exit(main())
