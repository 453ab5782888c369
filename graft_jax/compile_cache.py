"""XLA's persistent compilation cache: compiled programs kept on disk across processes.

Each program of a run (the update, the sampler's prefill and decode loop, the
scorer) takes seconds to compile on CPU and longer at the paper's sizes on a
GPU. With the cache on, a process that needs a program some earlier process
compiled loads it from disk instead: the toy job's other runs and its
evaluations, a run resumed after a preemption, the next experiment on the same
shapes. The key is JAX's own (the program, its compile options, the jaxlib
version and the device kind), so a hit is the executable a fresh compile would
build for this machine. XLA's CPU code is compiled for the host processor's
instruction set (`graft_jax.host_fingerprint`), which JAX's key does not
capture, so the folder is split by a tag of the processor, its feature flags,
jaxlib and ``XLA_FLAGS``: a home directory shared by different machines never
hands one of them another's CPU code.

``TrainConfig.perf.compile_cache_dir`` sets the folder (``~/.cache/graft_jax/xla``;
'' turns the cache off), as does ``compile_cache_dir`` in
``configs/benchmarks.py`` for ``launch/eval.py``; `enable` applies it to the
process. The trainer enables it before any model loads
(`graft_jax.train.setup.start_processes`), the toy job in each of its
processes (`graft_jax.experiments.toy_compare`), the evaluation launcher
before its model loads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

from graft_jax import host_fingerprint

log = logging.getLogger(__name__)

MAX_BYTES = 4 * 2 ** 30  # above this, the least recently used programs are deleted
# Programs that compile faster than this are not worth a file each.
MIN_COMPILE_SECONDS = 0.2


def machine_tag(cpuinfo: str | None = None) -> str:
  """16 hex digits naming what compiled XLA code depends on besides the program:
  the processor and its feature flags, jaxlib, ``XLA_FLAGS``."""
  if cpuinfo is None:
    cpuinfo = host_fingerprint.read_cpuinfo()
  fields = host_fingerprint.cpuinfo_fields(cpuinfo)
  flags = " ".join(sorted(fields.get("flags", fields.get("Features", "")).split()))
  key = dict(host_fingerprint.fingerprint(cpuinfo), flags=flags)
  return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def enable(folder: str, *, min_compile_seconds: float = MIN_COMPILE_SECONDS) -> Path | None:
  """Turns the persistent cache on in ``folder``/<machine tag> for the rest of the
  process; returns the folder used. '' leaves the process as it is, and a
  folder that cannot be created leaves it so with a warning. Programs compiled
  before the call are not written; later ones that compile for at least
  ``min_compile_seconds`` are."""
  if not folder:
    return None
  path = Path(os.path.expanduser(folder)) / machine_tag()
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:  # a read-only home: the run goes on, compiling every program
    log.warning("compile_cache_dir %s is not usable (%s); compiled programs are not kept",
                folder, e.strerror or e)
    return None
  jax.config.update("jax_compilation_cache_dir", str(path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
  jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
  # JAX opens its cache folder once per process: this makes it open the one above,
  # also where an earlier call opened another.
  compilation_cache.reset_cache()
  log.debug("XLA compilation cache: %s", path)
  return path
