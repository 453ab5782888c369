"""What a run prints at start: its mesh, and the bytes each device holds of a state."""

from __future__ import annotations

import collections

import jax
from jax.sharding import Mesh


def describe_mesh(mesh: Mesh) -> str:
  """e.g. 'mesh data=2 x fsdp=4 x tensor=1 over 8 cpu devices'."""
  axes = " x ".join(f"{name}={size}" for name, size in mesh.shape.items())
  return f"mesh {axes} over {mesh.devices.size} {mesh.devices.flat[0].platform} devices"


def bytes_per_device(tree) -> dict:
  """{device: bytes of `tree`'s arrays stored on it}, counting each shard where it lives."""
  out: dict = collections.Counter()
  for leaf in jax.tree.leaves(tree):
    for shard in getattr(leaf, "addressable_shards", ()):
      out[shard.device] += shard.data.nbytes
  return dict(out)


def max_bytes_per_device(tree) -> int:
  """The largest per-device footprint of `tree` (what decides whether it fits)."""
  return max(bytes_per_device(tree).values(), default=0)


def format_bytes(n: float) -> str:
  """Bytes in B / KiB / MiB / GiB, e.g. '1.5 GiB'."""
  for unit in ("B", "KiB", "MiB"):
    if abs(n) < 1024:
      return f"{n:.1f} {unit}"
    n /= 1024
  return f"{n:.2f} GiB"
