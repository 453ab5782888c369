"""What a toy-pair build's floating-point results depend on besides its recipe.

XLA's CPU code is compiled for the host processor: its vector width, its
instruction set and its cache sizes choose how each matmul and reduction is
split and summed. The same recipe therefore gives the same weights bit for bit
on processors of one kind, and slightly different weights on another (measured:
the shipped pair's warm start, rebuilt on a processor of another model, ends
with different bits, and capping XLA at AVX2 on one machine changes them too).
A build records this fingerprint, so a rebuild can tell the two cases apart.
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
