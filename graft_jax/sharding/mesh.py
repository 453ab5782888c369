"""Device mesh with the data / fsdp / tensor axes, built from a small config."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

MESH_AXES = ("data", "fsdp", "tensor")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Sizes of the mesh axes; one of them may be -1 (= all remaining devices)."""

  data: int = 1
  fsdp: int = -1
  tensor: int = 1

  def shape(self, num_devices: int) -> tuple[int, int, int]:
    sizes = [self.data, self.fsdp, self.tensor]
    if sizes.count(-1) > 1:
      raise ValueError(f"MeshConfig: at most one axis may be -1, got {self}")
    if any(s == 0 or s < -1 for s in sizes):
      raise ValueError(f"MeshConfig: axis sizes must be positive or -1, got {self}")
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
      if num_devices % known:
        raise ValueError(f"MeshConfig {self}: {num_devices} devices do not divide by {known}")
      sizes[sizes.index(-1)] = num_devices // known
    if int(np.prod(sizes)) != num_devices:
      raise ValueError(f"MeshConfig {self} needs {int(np.prod(sizes))} devices, "
                       f"{num_devices} available")
    return tuple(sizes)


def make_mesh(cfg: MeshConfig = MeshConfig(), devices=None) -> Mesh:
  """A mesh over `devices` (default: all) with axes ('data', 'fsdp', 'tensor').

  Axes are Auto: jit with NamedSharding in/out shardings places the rest.
  """
  devices = list(devices if devices is not None else jax.devices())
  shape = cfg.shape(len(devices))
  return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)
