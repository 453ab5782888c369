"""Which tensors a weight push sends, in which order, and how they are cut into buckets.

One entry per served tensor, in the model's parameter order, each once: a tied
embedding is sent once and the server (launched from a tied checkpoint) shares
it with its head. Two bucket rules, because the two backends cut differently:
``fit_buckets`` keeps every bucket within the cap (our IPC staging buffer has
exactly that size), ``vllm_packed_buckets`` reproduces how vLLM's packed NCCL
receiver cuts the stream (it closes a bucket on the first tensor that takes it
*over* the cap), since both ends must agree on every boundary.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class WireTensor:
  """One served tensor: Hugging Face name, shape and serving dtype, as vLLM expects them."""

  name: str
  shape: tuple[int, ...]
  dtype: np.dtype

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.dtype.itemsize

  @property
  def dtype_name(self) -> str:
    """The name vLLM resolves with ``getattr(torch, name)``: 'bfloat16', 'float32', ..."""
    return self.dtype.name


def wire_plan(serving) -> list[WireTensor]:
  """`serving`: ``(hf_name, shape, dtype)`` rows (``vllm_sync.serving_plan`` order).
  Raises on a name listed twice: the receiver would load it twice, and a
  mismatched duplicate would be a silent overwrite."""
  out, seen = [], set()
  for name, shape, dtype in serving:
    if name in seen:
      raise ValueError(f"weight push lists {name!r} twice; each tensor is sent once")
    seen.add(name)
    out.append(WireTensor(name, tuple(int(s) for s in shape), np.dtype(dtype)))
  return out


def fit_buckets(plan: list[WireTensor], cap_bytes: int) -> list[list[int]]:
  """Indices into `plan`, grouped in order so no bucket exceeds `cap_bytes`."""
  buckets, size = [[]], 0
  for i, t in enumerate(plan):
    if t.nbytes > cap_bytes:
      raise ValueError(f"{t.name} is {t.nbytes} bytes, more than the bucket cap "
                       f"{cap_bytes}; raise the cap to at least that")
    if buckets[-1] and size + t.nbytes > cap_bytes:
      buckets.append([])
      size = 0
    buckets[-1].append(i)
    size += t.nbytes
  return [b for b in buckets if b]


def vllm_packed_buckets(plan: list[WireTensor], cap_bytes: int) -> list[list[int]]:
  """Indices into `plan` grouped exactly as vLLM 0.32's packed NCCL receiver groups them:
  tensors accumulate until the running size is *greater* than `cap_bytes`, and the
  tensor that crossed it closes the bucket (so a bucket can exceed the cap by
  one tensor)."""
  buckets, current, size = [], [], 0
  for i, t in enumerate(plan):
    current.append(i)
    size += t.nbytes
    if size > cap_bytes:
      buckets.append(current)
      current, size = [], 0
  if current:
    buckets.append(current)
  return buckets
