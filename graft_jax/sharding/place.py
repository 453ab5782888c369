"""Shardings for NNX states and batches, and placing a model on a mesh."""

from __future__ import annotations

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graft_jax.sharding.rules import LogicalRules


def _is_var(x) -> bool:
  return isinstance(x, nnx.Variable)


def state_shardings(state, mesh: Mesh, rules: LogicalRules | None = None):
  """A state-shaped tree of NamedShardings from each Variable's `logical_axes`.

  Variables without the metadata (RNG counters, optimizer scalars) are replicated.
  Usable as `in_shardings`/`out_shardings` of `jax.jit` and with `jax.device_put`.
  """
  rules = rules or LogicalRules()

  def one(v):
    axes = v.get_metadata().get("logical_axes")
    shape = getattr(v.get_value(), "shape", ())
    if axes is None or len(axes) != len(shape):
      return v.replace(NamedSharding(mesh, PartitionSpec()))
    return v.replace(NamedSharding(mesh, rules.spec(axes, shape, mesh)))

  return jax.tree.map(one, state, is_leaf=_is_var)


def batch_sharding(mesh: Mesh, rules: LogicalRules | None = None, ndim: int = 2
                   ) -> NamedSharding:
  """Rows split over the batch rule (data x fsdp by default), the rest replicated."""
  rules = rules or LogicalRules()
  return NamedSharding(mesh, rules.spec(("batch",) + (None,) * (ndim - 1), mesh=mesh))


def shard_model(model: nnx.Module, mesh: Mesh, rules: LogicalRules | None = None):
  """Moves `model`'s variables onto `mesh` in place; returns the state shardings."""
  state = nnx.state(model)
  shardings = state_shardings(state, mesh, rules)
  nnx.update(model, jax.device_put(state, shardings))
  return shardings
