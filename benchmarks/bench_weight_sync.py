"""Weight sync's reload path on this machine: seconds per GB to write a policy for vLLM and read it back.

Builds a random Qwen3-architecture decoder (~0.4B parameters by default,
fp32 master weights, tied embeddings), writes it with
`graft_jax.rollout.vllm_sync.write_weights` as the trainer does after every
step, and reads the file back with safetensors (what vLLM's `reload_weights`
reads). No vLLM needed; the numbers go into BENCHMARKS.md.

  .venv/bin/python benchmarks/bench_weight_sync.py [--layers 16 --hidden 1024 --dtype bfloat16 --repeats 3]
"""

import argparse
import os
import platform
import statistics
import tempfile
import time

import jax
from flax import nnx
from safetensors import safe_open

from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import vllm_sync


def read_back(path) -> int:
  total = 0
  with safe_open(path, "numpy") as f:
    for key in f.keys():
      total += f.get_tensor(key).nbytes
  return total


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--layers", type=int, default=16)
  ap.add_argument("--hidden", type=int, default=1024)
  ap.add_argument("--vocab", type=int, default=151936)
  ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--out", default=None, help="folder to write into (default: /dev/shm)")
  args = ap.parse_args()
  cfg = ModelConfig(model_type="qwen3", vocab_size=args.vocab, hidden_size=args.hidden,
                    intermediate_size=3 * args.hidden, num_layers=args.layers, num_heads=16,
                    num_kv_heads=8, head_dim=128, tie_word_embeddings=True, qk_norm=True)
  model = init_model(cfg, rngs=nnx.Rngs(0))
  params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  root = args.out or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
  with tempfile.TemporaryDirectory(dir=root) as out:
    write, write_cpu, read = [], [], []
    for _ in range(args.repeats + 1):  # the first write compiles the casts: not counted
      t0, c0 = time.perf_counter(), time.process_time()
      stats = vllm_sync.write_weights(model, out, args.dtype)
      write.append(time.perf_counter() - t0)
      write_cpu.append(time.process_time() - c0)
      t0 = time.perf_counter()
      nbytes = read_back(os.path.join(out, "model.safetensors"))
      read.append(time.perf_counter() - t0)
    size = os.path.getsize(os.path.join(out, "model.safetensors"))
  w, r, gb = statistics.median(write[1:]), statistics.median(read[1:]), size / 1e9
  cpu = statistics.median(write_cpu[1:])
  print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, jax "
        f"{jax.__version__}, folder {root or 'tmp'}")
  print(f"model: {params / 1e9:.3f}B parameters (fp32 master), served as {args.dtype}; "
        f"file {gb:.3f} GB ({nbytes / 1e9:.3f} GB of tensors read back)")
  print(f"write: {w:.2f} s median of {args.repeats} = {w / gb:.2f} s/GB wall; CPU time "
        f"{cpu:.2f} s = {cpu / gb:.2f} s/GB (all threads; less sensitive to a busy machine)")
  if isinstance(stats, dict):  # the streamed writer's split of its last write
    print(f"  of which cast + layout + fetch {stats['fetch_s']:.2f} s, file writes "
          f"{stats['write_s']:.2f} s")
  print(f"read back: {r:.2f} s median of {args.repeats} = {r / gb:.2f} s/GB")


if __name__ == "__main__":
  main()
