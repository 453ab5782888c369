"""Shardings for NNX states and batches, and placing a model on a mesh."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graft_jax.sharding.rules import LogicalRules


def _is_var(x) -> bool:
  return isinstance(x, nnx.Variable)


def state_shardings(state, mesh: Mesh, rules: LogicalRules | None = None):
  """A state-shaped tree of NamedShardings from each Variable's `logical_axes`.

  Variables without the metadata (RNG counters) and plain leaves (optimizer
  step counts) are replicated. An optax state of an NNX state keeps the
  Variables, so its moments follow their parameters. Usable as
  `in_shardings`/`out_shardings` of `jax.jit` and with `jax.device_put`.
  """
  rules = rules or LogicalRules()

  def one(v):
    if not _is_var(v):
      return NamedSharding(mesh, PartitionSpec())
    axes = v.get_metadata().get("logical_axes")
    shape = getattr(v.get_value(), "shape", ())
    if axes is None or len(axes) != len(shape):
      return v.replace(NamedSharding(mesh, PartitionSpec()))
    return v.replace(NamedSharding(mesh, rules.spec(axes, shape, mesh)))

  return jax.tree.map(one, state, is_leaf=_is_var)


def batch_sharding(mesh: Mesh, rules: LogicalRules | None = None, ndim: int = 2,
                   row_dim: int = 0) -> NamedSharding:
  """Rows (dimension `row_dim`) split over the batch rule (data x fsdp by default),
  the rest replicated; `row_dim=1` for micro-batches stacked on a leading axis."""
  rules = rules or LogicalRules()
  axes = [None] * ndim
  if ndim > row_dim:
    axes[row_dim] = "batch"
  return NamedSharding(mesh, rules.spec(tuple(axes), mesh=mesh))


def batch_axes(mesh: Mesh, rules: LogicalRules | None = None) -> tuple[str, ...]:
  """The mesh axes the batch rule splits rows over (none: rows are replicated)."""
  spec = (rules or LogicalRules()).spec(("batch",), mesh=mesh)[0]
  return () if spec is None else (spec,) if isinstance(spec, str) else tuple(spec)


def batch_shards(mesh: Mesh, rules: LogicalRules | None = None) -> int:
  """How many ways the batch rule splits rows: a row count must be a multiple of it."""
  return int(np.prod([mesh.shape[a] for a in batch_axes(mesh, rules)]))


def shard_model(model: nnx.Module, mesh: Mesh, rules: LogicalRules | None = None):
  """Moves `model`'s variables onto `mesh` in place; returns the state shardings."""
  state = nnx.state(model)
  shardings = state_shardings(state, mesh, rules)
  nnx.update(model, jax.device_put(state, shardings))
  return shardings
