"""What compiled XLA CPU code depends on besides the program: the processor, jaxlib, XLA_FLAGS.

XLA's CPU code is compiled for the host processor: its vector width, its
instruction set and its cache sizes choose how each matmul and reduction is
split and summed. So the same program gives the same bits on processors of one
kind, and slightly different ones on another (or with XLA capped at another
instruction set). Two users read this fingerprint: the compilation cache
(`graft_jax.compile_cache`) keeps one folder per fingerprint, so machines that
share a home never load each other's code, and a toy-pair build records it
(`graft_jax.toy.pair`), so a rebuild can tell a changed recipe from another
processor (`graft_jax.toy.rebuild_check`). It imports nothing of graft_jax.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def read_cpuinfo() -> str:
  """/proc/cpuinfo's text ('' where there is none)."""
  path = Path("/proc/cpuinfo")
  return path.read_text() if path.is_file() else ""


def cpuinfo_fields(text: str) -> dict:
  """The first processor's ``key: value`` lines of /proc/cpuinfo text."""
  first = text.split("\n\n", 1)[0]
  fields = {}
  for line in first.splitlines():
    key, sep, value = line.partition(":")
    if sep:
      fields[key.strip()] = value.strip()
  return fields


def fingerprint(cpuinfo: str | None = None) -> dict:
  """{"cpu", "jaxlib", "xla_flags"}: the processor (vendor, model name, family,
  model, stepping from /proc/cpuinfo, or the platform's machine and processor
  strings where there is none), the jaxlib version and XLA_FLAGS."""
  import jaxlib  # pylint: disable=import-outside-toplevel

  if cpuinfo is None:
    cpuinfo = read_cpuinfo()
  fields = cpuinfo_fields(cpuinfo)
  if fields:
    cpu = " / ".join(fields.get(k, "?") for k in
                     ("vendor_id", "model name", "cpu family", "model", "stepping"))
  else:
    cpu = f"{platform.machine()} / {platform.processor() or '?'}"
  return {"cpu": cpu, "jaxlib": jaxlib.__version__, "xla_flags": os.environ.get("XLA_FLAGS", "")}
