"""The weights the JAX sampler decodes from, cast and placed once per rollout call.

The trainer keeps its master weights in the parameter dtype (fp32), FSDP-sharded
over the mesh's batch axes. Decoding from them as they are would cast every
weight to the compute dtype inside each decode step and, on a mesh, all-gather
each FSDP shard in each step, thousands of times per rollout unless XLA hoists
both out of the loop. Instead each rollout call casts the floating weights to
the sampling dtype (the model's compute dtype, bf16 on a GPU) and reshards them
once, before its first compiled call: the batch axes (data, fsdp) leave each
weight's placement, so every device holds the weights whole, or split over the
tensor axis only (tensor parallel), and the decode loop gathers no weight.

The cast changes no value the model computes: every layer casts its weights to
the compute dtype before using them (`graft_jax.models.layers`), and a cast to
the same dtype is the identity. The price is one copy of the weights in the
sampling dtype per device while the call runs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec


def decoding_sharding(sharding, batch_axes: tuple[str, ...]):
  """``sharding`` without the mesh axes in ``batch_axes`` (a weight replicated over
  them); other shardings are kept as they are."""
  if not isinstance(sharding, NamedSharding):
    return sharding

  def keep(entry):
    names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    names = tuple(a for a in names if a not in batch_axes)
    return None if not names else names[0] if len(names) == 1 else names

  return NamedSharding(sharding.mesh, PartitionSpec(*map(keep, sharding.spec)))


def _recast(x, dtype) -> bool:
  return jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != dtype


def _cast_tree(state, dtype):
  return jax.tree.map(lambda x: x.astype(dtype) if _recast(x, dtype) else x, state)


def decoding_weights(state, dtype, batch_axes: tuple[str, ...] = ()):
  """``state``'s floating arrays in ``dtype``, each placed by `decoding_sharding`:
  one compiled cast-and-reshard. ``state`` itself when that changes nothing."""
  dtype = jnp.dtype(dtype)
  if not all(isinstance(x, jax.Array) for x in jax.tree.leaves(state)):
    state = jax.device_put(state)  # host arrays (a model loaded off any mesh)
  leaves = jax.tree.leaves(state)
  shardings = jax.tree.map(lambda x: decoding_sharding(x.sharding, batch_axes), state)
  if all(s == x.sharding and not _recast(x, dtype)
         for s, x in zip(jax.tree.leaves(shardings), leaves)):
    return state
  return jax.jit(_cast_tree, static_argnums=1, out_shardings=shardings)(state, dtype)
