"""Where a compiled program's time goes: a `jax.profiler` trace split by kind of XLA op.

`op_seconds(compiled, *args)` runs the program under the profiler and maps
each executed XLA op back to its HLO instruction, and from there to the jax
operation it came from (the instruction's ``op_name`` metadata);
`by_kind` sums the seconds into a few kinds (matmuls forward / backward,
attention products, logits, layout copies, the rest). On CPU the op events
come from XLA's thunk executor and need ``--xla_cpu_enable_xprof_traceme``
in ``XLA_FLAGS`` before JAX starts. Ops that run concurrently on different
threads each count their own wall time, so shares, not sums, are what to read.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import re
import tempfile

import jax

_INSTR = re.compile(r"\s*(?:ROOT )?%(\S+) = \S+ .*?op_name=\"([^\"]*)\"")


def hlo_sources(hlo_text: str) -> dict[str, str]:
  """HLO instruction name -> the ``op_name`` it came from."""
  return {m.group(1): m.group(2) for m in map(_INSTR.match, hlo_text.splitlines()) if m}


def trace_events(fn) -> list[dict]:
  """Calls ``fn()`` under the profiler; the trace's events (Chrome trace format)."""
  with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d, create_perfetto_trace=True):
      fn()
    return json.load(gzip.open(glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)[0]))[
        "traceEvents"]


def op_seconds(compiled, *args, repeats: int = 2) -> dict[tuple[str, str], float]:
  """{(instruction, op_name): seconds per call} of an AOT-compiled program."""
  sources = hlo_sources(compiled.as_text())
  jax.block_until_ready(compiled(*args))

  def run():
    for _ in range(repeats):
      jax.block_until_ready(compiled(*args))

  out: dict = collections.Counter()
  for e in trace_events(run):
    if e.get("ph") == "X" and e["name"] in sources:
      out[(e["name"], sources[e["name"]])] += e["dur"] / 1e6 / repeats
  return dict(out)


def kind_of(instruction: str, op_name: str) -> str:
  if "copy" in instruction or "transpose" in instruction:
    return "layout copies and transposes"
  if "btv" in op_name or "take_along_axis" in op_name or "gather" in instruction:
    return "logits and log-softmax"
  if "bkgts" in op_name or "btkgh" in op_name:
    return "attention products"
  if "dot_general" in op_name or op_name.endswith("/dot"):
    return "matmuls, backward" if "transpose(" in op_name else "matmuls, forward"
  return "elementwise and reductions (norms, RoPE, softmax, loss, optimizer)"


def by_kind(seconds: dict) -> dict[str, float]:
  """Shares of the traced op time by kind, largest first."""
  kinds: dict = collections.Counter()
  for (instruction, op_name), s in seconds.items():
    kinds[kind_of(instruction, op_name)] += s
  total = sum(kinds.values()) or 1.0
  return {k: v / total for k, v in kinds.most_common()}
