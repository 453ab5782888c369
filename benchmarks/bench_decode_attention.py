"""One decode step's attention over the KV cache: the CPU kernel against XLA's formulation.

Times `graft_jax.backends.cpu.decode_kernel` (the sampler's decode attention on
x86 CPUs with AVX-512 or AVX2; built at first use, for the host's best
instruction set unless ``--isa`` names one) against XLA's formulation of the same step
(the step's key and value written with ``dynamic_update_slice``, then
`Attention._cached` at one query per row with the kernel off: fused
multiply-and-sums), in one process, alternating, on random q / cache / masks of
the sampler's layout (keys B x K x H x S, values B x K x S x H). Both sides
update the caches in place (donated, threaded from call to call). Also times a
plain sum over the same keys and values (the rate at which the cache can be
read at all) and checks both against a float64 NumPy reference. The defaults
are the speed benchmark's model (2 kv heads, 2 query heads each, head_dim 64).
Run on an idle machine.

  .venv/bin/python benchmarks/bench_decode_attention.py [--rows 512 --slots 144 --group 2 --head-dim 64
      --isa avx2]
"""

import argparse
import functools
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from graft_jax.backends.cpu import decode_kernel

KV_HEADS = 2


def kernel(q, k, v, kn, vn, slot, mask, isa=None):
  return decode_kernel.decode_attention(q, k, v, kn, vn, slot, mask, scale=q.shape[-1] ** -0.5,
                                        isa=isa)


def xla(q, k, v, kn, vn, slot, mask):
  k = jax.lax.dynamic_update_slice(k, kn[..., None], (0, 0, 0, slot))
  v = jax.lax.dynamic_update_slice(v, vn[:, :, None], (0, 0, slot, 0))
  scores = (q[..., None] * k[:, :, None]).sum(axis=3) * q.shape[-1] ** -0.5
  probs = jax.nn.softmax(jnp.where(mask[:, None, None], scores, -1e30), axis=-1)
  return (probs[..., None] * v[:, :, None]).sum(axis=3), k, v


def read(q, k, v, kn, vn, slot, mask):
  del q, kn, vn, slot, mask
  return k.sum(axis=(2, 3)) + v.sum(axis=(2, 3)), k, v


def reference(q, k, v, mask):
  s = np.einsum("bkgh,bkhs->bkgs", q.astype(np.float64), k) * q.shape[-1] ** -0.5
  s = np.where(mask[:, None, None], s, -1e30)
  p = np.exp(s - s.max(-1, keepdims=True))
  return np.einsum("bkgs,bksh->bkgh", p / p.sum(-1, keepdims=True), v.astype(np.float64))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=512)
  ap.add_argument("--slots", type=int, default=144)
  ap.add_argument("--calls", type=int, default=20)
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--group", type=int, default=2, help="query heads per kv head")
  ap.add_argument("--head-dim", type=int, default=64)
  ap.add_argument("--isa", choices=tuple(decode_kernel.ISAS), default=None,
                  help="the kernel's build (default: the host's best)")
  args = ap.parse_args()
  b, s, g, h = args.rows, args.slots, args.group, args.head_dim
  rng = np.random.default_rng(0)
  q = rng.standard_normal((b, KV_HEADS, g, h)).astype(np.float32)
  k = rng.standard_normal((b, KV_HEADS, h, s)).astype(np.float32)
  v = rng.standard_normal((b, KV_HEADS, s, h)).astype(np.float32)
  mask = np.zeros((b, s), bool)
  for row in range(b):  # left padding, then the filled slots
    mask[row, rng.integers(0, s // 8):rng.integers(s // 2, s + 1)] = True
  mask[min(3, b - 1)] = False  # a row that sees nothing
  isa = args.isa or decode_kernel.best_isa()
  reason = decode_kernel.unavailable_reason(isa)
  if reason:
    raise SystemExit(f"the decode-attention kernel cannot run here: it {reason}")
  kn = rng.standard_normal((b, KV_HEADS, h)).astype(np.float32)
  vn = rng.standard_normal((b, KV_HEADS, h)).astype(np.float32)
  slot = s // 2  # a filled slot
  mask[:, slot] = mask[:, slot] | (np.arange(b) != min(3, b - 1))
  k_ref, v_ref = k.copy(), v.copy()
  k_ref[..., slot], v_ref[:, :, slot] = kn, vn
  want = reference(q, k_ref, v_ref, mask)
  calls = {name: jax.jit(fn, donate_argnums=(1, 2)) for name, fn in
           (("kernel", functools.partial(kernel, isa=isa)), ("XLA", xla),
            ("plain sum of K and V", read))}
  fixed = [jax.device_put(x) for x in (q, kn, vn, np.int32(slot), mask)]
  caches = {name: [jax.device_put(k), jax.device_put(v)] for name in calls}

  def call(name):
    out, *caches[name] = calls[name](fixed[0], *caches[name], *fixed[1:])
    return out

  for name in ("kernel", "XLA"):
    err = float(np.abs(np.asarray(call(name)) - want).max())
    print(f"{name}: largest error against float64 NumPy {err:.1e}")
  call("plain sum of K and V")
  times = {name: [] for name in calls}
  for _ in range(args.rounds):  # alternating
    for name in calls:
      t = time.perf_counter()
      for _ in range(args.calls):
        out = call(name)
      jax.block_until_ready(out)
      times[name].append((time.perf_counter() - t) / args.calls)
  cache_gb = 2 * b * KV_HEADS * s * h * 4 / 1e9
  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.2f}; kernel built for {isa}; {b} rows x {s} slots, G = {g}, H = {h}, "
        f"{cache_gb * 1e3:.0f} MB of cache")
  med = {name: statistics.median(ts) for name, ts in times.items()}
  for name, m in med.items():
    print(f"{name}: {m * 1e3:.2f} ms ({cache_gb / m:.1f} GB/s)")
  print(f"kernel / XLA time: {med['kernel'] / med['XLA']:.2f}x")


if __name__ == "__main__":
  main()
