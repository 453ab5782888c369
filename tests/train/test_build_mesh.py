"""The run's mesh on one device: none is entered, so the second step reuses the first's programs."""

import jax
import jax.numpy as jnp

from graft_jax.config import run_config as config_lib
from graft_jax.train import setup


def test_one_device_enters_no_mesh_so_outputs_stay_uncommitted():
  """Under an entered mesh a program's outputs come back committed to it while the
  loaded weights are not: step 2's arguments would then differ from step 1's and
  every program would compile again."""
  assert jax.device_count() == 1
  cfg = config_lib.from_config_dict(config_lib.config_dict())
  assert setup.build_mesh(cfg) is None
  x_B = jnp.ones(3)
  assert not x_B.committed
  assert not jax.jit(lambda v: v + 1)(x_B).committed
