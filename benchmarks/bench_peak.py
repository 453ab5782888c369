"""This machine's f32 peaks next to the rates the speed benchmarks take as their ceilings.

  .venv/bin/python benchmarks/bench_peak.py [--repeats 7]

`benchmarks/bench_vs_trl.py` bounds the sampler and the update by two rates measured
through XLA: the f32 2048^3 matmul (`speed.matmul_flops_per_s`) and a 1 GiB sum
(`speed.read_bytes_per_s`). This script measures what the processor itself can
do, with a small C program built here by the host's C compiler (``-O3
-march=native -fopenmp``, OpenMP threads):

- the FMA peak: independent vector multiply-adds, 12 register accumulators per
  thread (enough to cover the latency of two FMA pipes), at the widest vector
  the ISA has (512 bits with AVX-512, else 256), GFLOP/s at 1 thread and at
  every core;
- the read rate: each thread sums its contiguous part of a 1 GiB f32 buffer
  that it wrote first (so its pages are local), GB/s at 1 thread and at every
  core;

and prints XLA's two rates as shares of them, measured in the same run
between the probe's rounds. A script, not a test: wall times, valid on an idle
machine only.
"""

import argparse
import ctypes
import os
import pathlib
import shutil
import statistics
import subprocess
import tempfile

import _path  # noqa: F401  (the repository root on sys.path)
from benchmarks import speed

SOURCE = r"""
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#if defined(__AVX512F__)
#define VBYTES 64
#else
#define VBYTES 32
#endif
typedef float V __attribute__((vector_size(VBYTES)));
#define LANES (VBYTES / 4)

// Seconds of `iters` rounds of 12 independent a = a * b + c per thread.
double fma_seconds(int threads, long iters) {
  double t0 = 0, t1 = 0;
  float sink = 0;
  #pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    V b, c, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
    for (int i = 0; i < LANES; ++i) {
      b[i] = 1.0000001f; c[i] = 1e-7f;
      a0[i] = 0; a1[i] = 1; a2[i] = 2; a3[i] = 3; a4[i] = 4; a5[i] = 5;
      a6[i] = 6; a7[i] = 7; a8[i] = 8; a9[i] = 9; a10[i] = 10; a11[i] = 11;
    }
    #pragma omp barrier
    #pragma omp master
    t0 = omp_get_wtime();
    for (long it = 0; it < iters; ++it) {
      a0 = a0 * b + c; a1 = a1 * b + c; a2 = a2 * b + c; a3 = a3 * b + c;
      a4 = a4 * b + c; a5 = a5 * b + c; a6 = a6 * b + c; a7 = a7 * b + c;
      a8 = a8 * b + c; a9 = a9 * b + c; a10 = a10 * b + c; a11 = a11 * b + c;
      __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5),
                       "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    #pragma omp barrier
    #pragma omp master
    t1 = omp_get_wtime();
    V s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    sink += s[0];
  }
  return sink == -1.0f ? -1.0 : t1 - t0;
}

int lanes(void) { return LANES; }

static float* buffer = NULL;
static size_t buffer_floats = 0;

// A buffer of n floats (a multiple of 64), each thread writing the part it will read.
int make_buffer(int threads, size_t n) {
  free(buffer);
  buffer = aligned_alloc(64, n * sizeof(float));
  if (!buffer) return 0;
  buffer_floats = n;
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; i += 64)
    for (int j = 0; j < 64; ++j) buffer[i + j] = 1.0f;
  return 1;
}

void free_buffer(void) {
  free(buffer);
  buffer = NULL;
  buffer_floats = 0;
}

// Seconds to sum the buffer, the threads splitting it as make_buffer did.
double read_seconds(int threads) {
  const size_t n = buffer_floats;
  float total = 0;
  const double t0 = omp_get_wtime();
  #pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    V x0 = {0}, x1 = {0}, x2 = {0}, x3 = {0};
    #pragma omp for schedule(static)
    for (size_t i = 0; i < n; i += 64) {
      for (int j = 0; j < 64; j += 4 * LANES) {
        x0 += *(const V*)(buffer + i + j);
        x1 += *(const V*)(buffer + i + j + LANES);
        x2 += *(const V*)(buffer + i + j + 2 * LANES);
        x3 += *(const V*)(buffer + i + j + 3 * LANES);
      }
    }
    V s = x0 + x1 + x2 + x3;
    for (int i = 0; i < LANES; ++i) total += s[i];
  }
  const double t = omp_get_wtime() - t0;
  return total == (float)n ? t : -t;
}
"""


def build(folder: pathlib.Path) -> ctypes.CDLL:
  """The probe compiled for this host (needs a C compiler with OpenMP)."""
  cc = shutil.which(os.environ.get("CC", "gcc"))
  if cc is None:
    raise SystemExit("bench_peak: no C compiler (gcc, or $CC) on PATH")
  src, lib = folder / "peak.c", folder / "peak.so"
  src.write_text(SOURCE)
  done = subprocess.run([cc, "-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", "-shared",
                         "-fPIC", str(src), "-o", str(lib)], capture_output=True, text=True)
  if done.returncode != 0:
    raise SystemExit(f"bench_peak: {cc} failed: {done.stderr.strip()[-1000:]}")
  probe = ctypes.CDLL(str(lib))
  probe.fma_seconds.restype = ctypes.c_double
  probe.fma_seconds.argtypes = [ctypes.c_int, ctypes.c_long]
  probe.read_seconds.restype = ctypes.c_double
  probe.read_seconds.argtypes = [ctypes.c_int]
  probe.make_buffer.argtypes = [ctypes.c_int, ctypes.c_size_t]
  return probe


READ_FLOATS = 2 ** 28  # 1 GiB; a power of two, so the probe's float sum of ones is exact


def probe_flops_per_s(probe, threads: int, iters: int = 50_000_000) -> float:
  flops = threads * iters * 12 * 2 * probe.lanes()
  return flops / probe.fma_seconds(threads, iters)


def probe_read_bytes_per_s(probe, threads: int) -> float:
  n = READ_FLOATS
  if not probe.make_buffer(threads, n):
    raise SystemExit("bench_peak: could not allocate the read buffer")
  probe.read_seconds(threads)  # warm
  seconds = probe.read_seconds(threads)
  if seconds <= 0:
    raise SystemExit("bench_peak: the read probe summed a wrong total")
  return n * 4 / seconds


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=7,
                  help="rounds (each rate's best, median and worst are printed)")
  args = ap.parse_args()
  cores = os.cpu_count()
  print(f"command: .venv/bin/python benchmarks/bench_peak.py --repeats {args.repeats}")
  print(f"machine: {cores} CPUs; load average {os.getloadavg()[0]:.2f}")
  rates = {k: [] for k in ("fma_1", "fma_all", "read_1", "read_all", "xla_mm", "xla_read")}
  with tempfile.TemporaryDirectory() as tmp:
    probe = build(pathlib.Path(tmp))
    print(f"vector: {probe.lanes() * 32} bits")
    for _ in range(args.repeats):  # alternating, so a drift touches all of them alike
      rates["fma_1"].append(probe_flops_per_s(probe, 1))
      rates["fma_all"].append(probe_flops_per_s(probe, cores))
      rates["read_1"].append(probe_read_bytes_per_s(probe, 1))
      rates["read_all"].append(probe_read_bytes_per_s(probe, cores))
      rates["xla_mm"].append(speed.matmul_flops_per_s())
      rates["xla_read"].append(speed.read_bytes_per_s())
    probe.free_buffer()
  best = {k: max(v) for k, v in rates.items()}

  def spread(key: str, unit: float) -> str:
    values = [v / unit for v in rates[key]]
    mid = statistics.median(values)
    return f"best {max(values):.1f}, median {mid:.1f}, worst {min(values):.1f}"

  print(f"\n| rate | {args.repeats} rounds |\n|---|---|")
  print(f"| FMA peak, 1 thread (GFLOP/s) | {spread('fma_1', 1e9)} |")
  print(f"| FMA peak, {cores} threads (GFLOP/s) | {spread('fma_all', 1e9)} |")
  print(f"| XLA f32 2048^3 matmul (GFLOP/s) | {spread('xla_mm', 1e9)} |")
  print(f"| read, 1 thread (GB/s) | {spread('read_1', 1e9)} |")
  print(f"| read, {cores} threads (GB/s) | {spread('read_all', 1e9)} |")
  print(f"| XLA 1 GiB sum (GB/s) | {spread('xla_read', 1e9)} |")
  print(f"\nthe matmul ceiling is {best['xla_mm'] / best['fma_all']:.0%} of the {cores}-thread FMA "
        f"peak; the XLA read rate is {best['xla_read'] / best['read_all']:.0%} of the "
        f"{cores}-thread read rate (one thread alone reads at "
        f"{best['read_1'] / best['read_all']:.0%} of it)")


if __name__ == "__main__":
  main()
