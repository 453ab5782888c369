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
Each row reads only its live span, from its first live slot to its last: the
softmax weight of every slot outside it is exactly 0, so the sums are the same,
and a decode step's window of the cache (`graft_jax.rollout.sampler`) holds
the left padding and the slots later steps will fill, which it then skips.

It is an XLA FFI custom call. The source ships with the package and is compiled
at first use with the host's C++ compiler, for the best instruction set the
processor has (`ISAS`: AVX-512, else AVX2 with FMA), into
``~/.cache/graft_jax/kernels`` (``GRAFT_KERNEL_CACHE`` overrides), named by a
hash of the source, the compiler, its flags and jaxlib; later processes load
the built library. Where it cannot be built (no compiler, neither instruction
set, not x86-64), `unavailable_reason` says why, and the decoder's 'auto'
decode attention keeps XLA's formulation (`graft_jax.models.layers.Attention`).
Only a CPU backend calls it (`graft_jax.backends.decode_attention_reason`).
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
TARGET = "graft_decode_attention"  # registered as TARGET + "_" + the ISA
HEAD_DIMS = (32, 64, 128, 256)
# The instruction sets the kernel is built for, best first: (the /proc/cpuinfo
# flags it needs, the -march that enables them). x86-64-v4 is AVX-512 F, BW, CD,
# DQ and VL; x86-64-v3 is AVX2, FMA, BMI1/2, F16C, LZCNT and MOVBE.
ISAS = {
    "avx512": (("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "fma"), "x86-64-v4"),
    "avx2": (("avx2", "fma", "bmi1", "bmi2", "f16c", "abm", "movbe"), "x86-64-v3"),
}
CXX_FLAGS = ("-O3", "-mtune=native", "-std=c++20", "-shared", "-fPIC")


def _compiler() -> str:
  return os.environ.get("CXX", "g++")


def cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get("GRAFT_KERNEL_CACHE")
                      or "~/.cache/graft_jax/kernels").expanduser()


@functools.cache
def host_isas() -> tuple[str, ...]:
  """The instruction sets of `ISAS` this host's processor has, best first (empty
  off x86-64 or where /proc/cpuinfo cannot be read)."""
  if platform.machine() not in ("x86_64", "AMD64"):
    return ()
  try:
    flags = set(pathlib.Path("/proc/cpuinfo").read_text().split())
  except OSError:
    return ()
  return tuple(isa for isa, (needed, _) in ISAS.items() if set(needed) <= flags)


def host_reason() -> str | None:
  """Why this host cannot run the kernel (not x86-64, neither AVX-512 nor AVX2,
  no compiler), checked without building it; None if it can."""
  if platform.machine() not in ("x86_64", "AMD64"):
    return f"needs x86-64, this is {platform.machine()}"
  if not host_isas():
    return ("needs AVX-512 (" + ", ".join(ISAS["avx512"][0]) + ") or AVX2 ("
            + ", ".join(ISAS["avx2"][0]) + "); /proc/cpuinfo lists neither set")
  if shutil.which(_compiler()) is None:
    return f"no C++ compiler ({_compiler()}) on PATH"
  return None


def _build(isa: str) -> pathlib.Path:
  """Compiles the kernel for `isa` unless a library built from the same inputs is cached."""
  cxx = shutil.which(_compiler())
  flags = (f"-march={ISAS[isa][1]}", *CXX_FLAGS)
  version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                           check=True).stdout.splitlines()[0]
  key = hashlib.sha256(b"\0".join([
      SOURCE.read_bytes(), version.encode(), " ".join(flags).encode(),
      jax.__version__.encode(), jax.lib.__version__.encode()])).hexdigest()[:16]
  folder = cache_dir()
  lib = folder / f"decode_attention-{isa}-{key}.so"
  if lib.exists():
    return lib
  folder.mkdir(parents=True, exist_ok=True)
  # Built under a temporary name and renamed: processes racing to build it
  # each write their own file, and the rename is atomic.
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
  os.close(fd)
  try:
    done = subprocess.run([cxx, *flags, f"-I{jax.ffi.include_dir()}", str(SOURCE),
                           "-o", tmp, "-lmvec"], capture_output=True, text=True)
    if done.returncode != 0:
      raise RuntimeError(f"{cxx} failed on {SOURCE.name}: {done.stderr.strip()[-2000:]}")
    os.replace(tmp, lib)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)
  log.info("built the decode-attention kernel for %s: %s", isa, lib)
  return lib


def best_isa() -> str | None:
  """The instruction set the kernel runs with on this host (None: it cannot run)."""
  isas = host_isas()
  return isas[0] if isas and host_reason() is None else None


def unavailable_reason(isa: str | None = None) -> str | None:
  """None once the kernel for `isa` (None: `best_isa`) is built and registered
  with XLA (the first call for an ISA does that); otherwise one line saying why
  it cannot be."""
  return _registered(isa or best_isa())


@functools.cache
def _registered(isa: str | None) -> str | None:
  reason = host_reason()
  if reason is None and isa not in host_isas():
    reason = f"cannot use {isa}: this processor has {', '.join(host_isas())}"
  if reason is None:
    try:
      lib = ctypes.cdll.LoadLibrary(str(_build(isa)))
      jax.ffi.register_ffi_target(f"{TARGET}_{isa}",
                                  jax.ffi.pycapsule(lib.GraftDecodeAttention), platform="cpu")
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
      reason = f"building it failed: {e}"
  if reason is not None:
    log.info("decode attention stays with XLA: the CPU kernel %s", reason)
  return reason


def applies(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH) -> str | None:
  """Why the kernel cannot take these operands (None: it can): the dtypes, the
  head dim, then the host and build (`unavailable_reason`). The backend is the
  caller's check (`graft_jax.backends`)."""
  dtypes = {x.dtype for x in (q_BxKxGxH, k_BxKxHxS, v_BxKxSxH)}
  if dtypes != {jnp.dtype(jnp.float32)}:
    return f"takes float32 only, got {sorted(str(d) for d in dtypes)}"
  if q_BxKxGxH.shape[-1] not in HEAD_DIMS:
    return f"takes head_dim in {HEAD_DIMS}, got {q_BxKxGxH.shape[-1]}"
  return unavailable_reason()


def decode_attention(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, k_new_BxKxH, v_new_BxKxH, index,
                     mask_BxS, *, scale: float, isa: str | None = None):
  """Writes this step's key and value at slot ``index`` of the caches, then
  softmax(scale * q k^T masked) v for one query per (row, query head), as the
  module docstring gives it. Returns (out_BxKxGxH, k_BxKxHxS, v_BxKxSxH): the
  caches are updated in place (the kernel's outputs alias them), as
  ``dynamic_update_slice`` would give them. `isa` picks the build (None: the
  host's best, `best_isa`). `applies` says whether it can run."""
  isa = isa or best_isa()
  reason = unavailable_reason(isa)  # builds and registers the kernel on first use
  if reason is not None:
    raise RuntimeError(f"the CPU decode-attention kernel {reason}")
  f32 = lambda x: jax.ShapeDtypeStruct(x.shape, jnp.float32)
  call = jax.ffi.ffi_call(f"{TARGET}_{isa}", (f32(q_BxKxGxH), f32(k_BxKxHxS), f32(v_BxKxSxH)),
                          input_output_aliases={1: 1, 2: 2})
  return call(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, k_new_BxKxH.astype(jnp.float32),
              v_new_BxKxH.astype(jnp.float32), jnp.asarray(index, jnp.int32),
              mask_BxS.astype(bool), scale=np.float32(scale))
