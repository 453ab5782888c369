"""Device mesh with the data / fsdp / tensor axes, built from a small config."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

MESH_AXES = ("data", "fsdp", "tensor")


class MeshAxisError(ValueError):
  """A mesh axis size that no device count can take; ``axis`` names it (None when
  the sizes together are at fault)."""

  def __init__(self, message: str, axis: str | None = None):
    super().__init__(message)
    self.axis = axis


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Sizes of the mesh axes; one of them may be -1 (= all remaining devices).

  The run config's ``mesh`` section is this class. Its default replicates the
  model state over every device (data parallel); ``fsdp`` splits the state and
  ``tensor`` the weight matrices, for models that do not fit one device.
  """

  data: int = -1
  fsdp: int = 1
  tensor: int = 1

  def check(self) -> None:
    """Raises `MeshAxisError` unless every size is >= 1 or -1, with at most one -1."""
    sizes = dataclasses.asdict(self)
    for axis, size in sizes.items():
      if not isinstance(size, int) or (size != -1 and size < 1):
        raise MeshAxisError(f"mesh.{axis} must be >= 1 or -1 (the rest), got {size}", axis)
    if list(sizes.values()).count(-1) > 1:
      raise MeshAxisError(f"at most one mesh axis may be -1, got {sizes}")

  def shape(self, num_devices: int) -> tuple[int, int, int]:
    """The (data, fsdp, tensor) sizes over ``num_devices`` devices."""
    self.check()
    sizes = [self.data, self.fsdp, self.tensor]
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
      if num_devices % known:
        raise ValueError(f"MeshConfig {self}: {num_devices} devices do not divide by {known}")
      sizes[sizes.index(-1)] = num_devices // known
    if int(np.prod(sizes)) != num_devices:
      raise ValueError(f"MeshConfig {self} needs {int(np.prod(sizes))} devices, "
                       f"{num_devices} available")
    return tuple(sizes)

  def state_shards(self, num_devices: int) -> int:
    """Devices one model's state is split over: fsdp x tensor (the data axis
    replicates it), with a -1 axis taking what the others leave."""
    sizes = [self.data, self.fsdp, self.tensor]
    if -1 in sizes:
      known = int(np.prod([s for s in sizes if s != -1]))
      sizes[sizes.index(-1)] = max(num_devices // known, 1)
    return max(sizes[1] * sizes[2], 1)


def make_mesh(cfg: MeshConfig = MeshConfig(), devices=None) -> Mesh:
  """A mesh over `devices` (default: all) with axes ('data', 'fsdp', 'tensor').

  Axes are Auto: jit with NamedSharding in/out shardings places the rest.
  """
  devices = list(devices if devices is not None else jax.devices())
  shape = cfg.shape(len(devices))
  return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)
