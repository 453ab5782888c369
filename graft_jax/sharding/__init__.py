"""Mesh (data/fsdp/tensor), logical->physical rules, and placement of NNX states."""

from graft_jax.sharding.mesh import MESH_AXES, MeshConfig, make_mesh
from graft_jax.sharding.place import (batch_axes, batch_shards, batch_sharding, shard_model,
                                      state_shardings)
from graft_jax.sharding.report import (bytes_per_device, describe_mesh, format_bytes,
                                       max_bytes_per_device)
from graft_jax.sharding.rules import DEFAULT_RULES, LogicalRules, ShardingError

__all__ = ["DEFAULT_RULES", "MESH_AXES", "LogicalRules", "MeshConfig", "ShardingError",
           "batch_axes", "batch_shards", "batch_sharding", "bytes_per_device", "describe_mesh",
           "format_bytes", "make_mesh", "max_bytes_per_device", "shard_model",
           "state_shardings"]
