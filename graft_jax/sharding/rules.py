"""Logical axis names -> mesh axes, with checks that refuse ambiguous placements.

Parameters name their axes (`logical_axes` metadata, e.g. ("embed", "mlp"));
rules say which mesh axis each name is split over. A rule set may not name a
logical axis twice, and no array may use one mesh axis for two dimensions.
"""

from __future__ import annotations

from typing import Sequence

from jax.sharding import Mesh, PartitionSpec

Physical = str | tuple[str, ...] | None

# FSDP splits the model dimension; tensor parallelism splits heads, mlp and vocab.
DEFAULT_RULES: tuple[tuple[str, Physical], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("head_dim", None),
    ("norm", None),
    ("length", None),
    ("layers", None),  # the leading axis of stacked block weights (models.layer_storage)
)


class ShardingError(ValueError):
  """Rules or an array's axes that cannot be turned into one placement."""


class LogicalRules:
  """A validated logical -> physical table."""

  def __init__(self, rules: Sequence[tuple[str, Physical]] = DEFAULT_RULES):
    table: dict[str, tuple[str, ...]] = {}
    for logical, physical in rules:
      if logical in table:
        raise ShardingError(f"logical axis {logical!r} has two rules")
      phys = () if physical is None else (physical,) if isinstance(physical, str) else tuple(
          physical)
      if len(set(phys)) != len(phys):
        raise ShardingError(f"rule {logical!r} -> {physical!r} repeats a mesh axis")
      table[logical] = phys
    self.table = table

  def spec(self, logical_axes: Sequence[str | None], shape: Sequence[int] | None = None,
           mesh: Mesh | None = None) -> PartitionSpec:
    """The PartitionSpec for one array.

    Unknown names and None replicate. With `shape` and `mesh`, a dimension
    that a mesh axis does not divide is replicated over that axis (a small
    kv-head count under a larger tensor axis, say), never padded.
    """
    used: dict[str, str] = {}
    out = []
    for dim, name in enumerate(logical_axes):
      phys = self.table.get(name, ()) if name is not None else ()
      if mesh is not None:
        phys = tuple(a for a in phys if a in mesh.shape)
      if shape is not None and mesh is not None:
        phys = _dividing(phys, shape[dim], mesh)
      for axis in phys:
        if axis in used:
          raise ShardingError(f"logical axes {tuple(logical_axes)}: {used[axis]!r} and "
                              f"{name!r} both map to mesh axis {axis!r}")
        used[axis] = name
      out.append(None if not phys else phys[0] if len(phys) == 1 else phys)
    return PartitionSpec(*out)


def _dividing(axes: tuple[str, ...], size: int, mesh: Mesh) -> tuple[str, ...]:
  kept, prod = [], 1
  for axis in axes:
    if size % (prod * mesh.shape[axis]) == 0:
      kept.append(axis)
      prod *= mesh.shape[axis]
  return tuple(kept)
