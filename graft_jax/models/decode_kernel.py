"""The sampler's decode-step attention as a hand-written CPU kernel (`decode_kernel.cc`).

One query per row attends over the KV cache at every decode step. On a CPU,
XLA runs that as two broadcast multiply-and-sums and a softmax, and it takes
about half of the sampler's time (BENCHMARKS.md, "Where the sampler's time
goes"). The kernel computes the same thing in one pass per (row, kv head),
after writing the step's key and value into the cache in place (the key
cache's layout makes that write strided, one float per cache line, which
costs a tenth of the sampler's time as a separate XLA update; inside the
kernel it touches lines the pass reads next):

    x_s = scale * q . k_s  where mask_s, else -1e30
    out = sum_s softmax(x)_s v_s

over the cache's own layout (keys B x K x H x S, values B x K x S x H), for
head_dim 32, 64, 128 or 256 and any number of query heads per kv head, f32.

It is an XLA FFI custom call. The source ships with the package and is compiled
at first use with the host's C++ compiler for x86-64 with AVX-512, into
``~/.cache/graft_jax/kernels`` (``GRAFT_KERNEL_CACHE`` overrides), named by a
hash of the source, the compiler, its flags and jaxlib; later processes load
the built library. Where it cannot be built (no compiler, no AVX-512, not
x86-64, not a CPU backend), `unavailable_reason` says why, and the decoder's
'auto' decode attention keeps XLA's formulation
(`graft_jax.models.layers.Attention`).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

log = logging.getLogger(__name__)

SOURCE = pathlib.Path(__file__).with_suffix(".cc")
TARGET = "graft_decode_attention"
HEAD_DIMS = (32, 64, 128, 256)
# x86-64-v4: AVX-512 F, BW, CD, DQ and VL, the instructions the kernel uses.
CXX_FLAGS = ("-O3", "-march=x86-64-v4", "-mtune=native", "-std=c++20", "-shared", "-fPIC")
_NEEDED_CPU_FLAGS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "fma")


def _compiler() -> str:
  return os.environ.get("CXX", "g++")


def cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get("GRAFT_KERNEL_CACHE")
                      or "~/.cache/graft_jax/kernels").expanduser()


def host_reason() -> str | None:
  """Why this host cannot run the kernel (not x86-64, no AVX-512, no compiler),
  checked without building it; None if it can."""
  if platform.machine() not in ("x86_64", "AMD64"):
    return f"needs x86-64, this is {platform.machine()}"
  try:
    flags = set(pathlib.Path("/proc/cpuinfo").read_text().split())
  except OSError:
    return "cannot read /proc/cpuinfo to check for AVX-512"
  missing = [f for f in _NEEDED_CPU_FLAGS if f not in flags]
  if missing:
    return f"the processor lacks {', '.join(missing)}"
  if shutil.which(_compiler()) is None:
    return f"no C++ compiler ({_compiler()}) on PATH"
  return None


def _build() -> pathlib.Path:
  """Compiles the kernel unless a library built from the same inputs is cached."""
  cxx = shutil.which(_compiler())
  version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                           check=True).stdout.splitlines()[0]
  key = hashlib.sha256(b"\0".join([
      SOURCE.read_bytes(), version.encode(), " ".join(CXX_FLAGS).encode(),
      jax.__version__.encode(), jax.lib.__version__.encode()])).hexdigest()[:16]
  folder = cache_dir()
  lib = folder / f"decode_attention-{key}.so"
  if lib.exists():
    return lib
  folder.mkdir(parents=True, exist_ok=True)
  # Built under a temporary name and renamed: processes racing to build it
  # each write their own file, and the rename is atomic.
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
  os.close(fd)
  try:
    done = subprocess.run([cxx, *CXX_FLAGS, f"-I{jax.ffi.include_dir()}", str(SOURCE),
                           "-o", tmp, "-lmvec"], capture_output=True, text=True)
    if done.returncode != 0:
      raise RuntimeError(f"{cxx} failed on {SOURCE.name}: {done.stderr.strip()[-2000:]}")
    os.replace(tmp, lib)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)
  log.info("built the decode-attention kernel: %s", lib)
  return lib


@functools.cache
def unavailable_reason() -> str | None:
  """None once the kernel is built and registered with XLA (first call only);
  otherwise one line saying why it cannot be."""
  reason = host_reason()
  if reason is None:
    try:
      lib = ctypes.cdll.LoadLibrary(str(_build()))
      jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.GraftDecodeAttention),
                                  platform="cpu")
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
      reason = f"building it failed: {e}"
  if reason is not None:
    log.info("decode attention stays with XLA: the CPU kernel %s", reason)
  return reason


def applies(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH) -> str | None:
  """Why the kernel cannot take these operands here (None: it can): the backend,
  the dtypes, the head dim, then the host and build (`unavailable_reason`)."""
  if jax.default_backend() != "cpu":
    return f"runs on CPUs only, the backend is {jax.default_backend()}"
  dtypes = {x.dtype for x in (q_BxKxGxH, k_BxKxHxS, v_BxKxSxH)}
  if dtypes != {jnp.dtype(jnp.float32)}:
    return f"takes float32 only, got {sorted(str(d) for d in dtypes)}"
  if q_BxKxGxH.shape[-1] not in HEAD_DIMS:
    return f"takes head_dim in {HEAD_DIMS}, got {q_BxKxGxH.shape[-1]}"
  return unavailable_reason()


def decode_attention(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, k_new_BxKxH, v_new_BxKxH, index,
                     mask_BxS, *, scale: float):
  """Writes this step's key and value at slot ``index`` of the caches, then
  softmax(scale * q k^T masked) v for one query per (row, query head), as the
  module docstring gives it. Returns (out_BxKxGxH, k_BxKxHxS, v_BxKxSxH): the
  caches are updated in place (the kernel's outputs alias them), as
  ``dynamic_update_slice`` would give them. `applies` says whether it can run."""
  reason = unavailable_reason()  # builds and registers the kernel on first use
  if reason is not None:
    raise RuntimeError(f"the CPU decode-attention kernel {reason}")
  f32 = lambda x: jax.ShapeDtypeStruct(x.shape, jnp.float32)
  call = jax.ffi.ffi_call(TARGET, (f32(q_BxKxGxH), f32(k_BxKxHxS), f32(v_BxKxSxH)),
                          input_output_aliases={1: 1, 2: 2})
  return call(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, k_new_BxKxH.astype(jnp.float32),
              v_new_BxKxH.astype(jnp.float32), jnp.asarray(index, jnp.int32),
              mask_BxS.astype(bool), scale=np.float32(scale))
