"""One decode step's attention over the KV cache: a hand-written CPU kernel against XLA's.

Builds launch/bench_decode_attention.cc (an XLA FFI custom call; g++ with
AVX-512, G = 2 and H = 64 as in the speed benchmark's model) and times it
against the sampler's own formulation (`Attention._cached` at one query per row:
fused multiply-and-sums), in one process, alternating, on random q / cache /
masks of the sampler's layout (keys B x K x H x S, values B x K x S x H). Also
times a plain sum over the same keys and values (the rate at which the cache
can be read at all) and checks both against a float64 NumPy reference. A
candidate for the sampler, not used by the library. Run on an idle machine.

  .venv/bin/python launch/bench_decode_attention.py [--rows 512 --slots 144]
"""

import argparse
import ctypes
import os
import pathlib
import platform
import statistics
import subprocess
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

KV_HEADS, GROUP, HEAD_DIM = 2, 2, 64
SOURCE = pathlib.Path(__file__).with_suffix(".cc")


def build(out_dir: pathlib.Path) -> None:
  lib = out_dir / "decode_attention.so"
  subprocess.run(["g++", "-O3", "-march=native", "-std=c++20", "-shared", "-fPIC",
                  f"-I{jax.ffi.include_dir()}", str(SOURCE), "-o", str(lib), "-lmvec"],
                 check=True, capture_output=True)
  jax.ffi.register_ffi_target("graft_decode_attention", jax.ffi.pycapsule(
      ctypes.cdll.LoadLibrary(str(lib)).GraftDecodeAttention), platform="cpu")


def kernel(q, k, v, mask):
  return jax.ffi.ffi_call("graft_decode_attention", jax.ShapeDtypeStruct(q.shape, q.dtype))(
      q, k, v, mask, scale=np.float32(HEAD_DIM ** -0.5))


def xla(q, k, v, mask):
  scores = (q[..., None] * k[:, :, None]).sum(axis=3) * HEAD_DIM ** -0.5
  probs = jax.nn.softmax(jnp.where(mask[:, None, None], scores, -1e30), axis=-1)
  return (probs[..., None] * v[:, :, None]).sum(axis=3)


def read(q, k, v, mask):
  del q, mask
  return k.sum(axis=(2, 3)) + v.sum(axis=(2, 3))


def reference(q, k, v, mask):
  s = np.einsum("bkgh,bkhs->bkgs", q.astype(np.float64), k) * HEAD_DIM ** -0.5
  s = np.where(mask[:, None, None], s, -1e30)
  p = np.exp(s - s.max(-1, keepdims=True))
  return np.einsum("bkgs,bksh->bkgh", p / p.sum(-1, keepdims=True), v.astype(np.float64))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=512)
  ap.add_argument("--slots", type=int, default=144)
  ap.add_argument("--calls", type=int, default=20)
  ap.add_argument("--rounds", type=int, default=7)
  args = ap.parse_args()
  b, s = args.rows, args.slots
  rng = np.random.default_rng(0)
  q = rng.standard_normal((b, KV_HEADS, GROUP, HEAD_DIM)).astype(np.float32)
  k = rng.standard_normal((b, KV_HEADS, HEAD_DIM, s)).astype(np.float32)
  v = rng.standard_normal((b, KV_HEADS, s, HEAD_DIM)).astype(np.float32)
  mask = np.zeros((b, s), bool)
  for row in range(b):  # left padding, then the filled slots
    mask[row, rng.integers(0, s // 8):rng.integers(s // 2, s + 1)] = True
  mask[min(3, b - 1)] = False  # a row that sees nothing
  with tempfile.TemporaryDirectory() as d:
    build(pathlib.Path(d))
  want = reference(q, k, v, mask)
  calls = {"kernel": jax.jit(kernel), "XLA": jax.jit(xla), "plain sum of K and V": jax.jit(read)}
  inputs = [jax.device_put(x) for x in (q, k, v, mask)]
  for name in ("kernel", "XLA"):
    err = float(np.abs(np.asarray(calls[name](*inputs)) - want).max())
    print(f"{name}: largest error against float64 NumPy {err:.1e}")
  times = {name: [] for name in calls}
  for _ in range(args.rounds):  # alternating
    for name, fn in calls.items():
      t = time.perf_counter()
      for _ in range(args.calls):
        out = fn(*inputs)
      jax.block_until_ready(out)
      times[name].append((time.perf_counter() - t) / args.calls)
  cache_gb = 2 * b * KV_HEADS * s * HEAD_DIM * 4 / 1e9
  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.2f}; {b} rows x {s} slots, "
        f"{cache_gb * 1e3:.0f} MB of cache")
  med = {name: statistics.median(ts) for name, ts in times.items()}
  for name, m in med.items():
    print(f"{name}: {m * 1e3:.2f} ms ({cache_gb / m:.1f} GB/s)")
  print(f"kernel / XLA time: {med['kernel'] / med['XLA']:.2f}x")


if __name__ == "__main__":
  main()
