"""Mesh and logical rules; sharded == unsharded on 8 fake CPU devices (subprocess)."""

import pathlib
import subprocess
import sys
import types

import jax
import pytest
import tiny_hf
from jax.sharding import PartitionSpec as P

from graft_jax.sharding import LogicalRules, MeshConfig, ShardingError, make_mesh
from tests import fake_devices


def test_default_rules_place_weights():
  rules = LogicalRules()
  assert rules.spec(("embed", "q_heads", "head_dim")) == P("fsdp", "tensor", None)
  assert rules.spec(("vocab", "embed")) == P("tensor", "fsdp")
  assert rules.spec(("batch", None)) == P(("data", "fsdp"), None)


def test_rules_refuse_collisions():
  with pytest.raises(ShardingError, match="two rules"):
    LogicalRules([("embed", "fsdp"), ("embed", "tensor")])
  rules = LogicalRules([("embed", "tensor"), ("mlp", "tensor")])
  with pytest.raises(ShardingError, match="both map to mesh axis 'tensor'"):
    rules.spec(("embed", "mlp"))


def test_indivisible_dimension_is_replicated():
  mesh = types.SimpleNamespace(shape={"data": 4, "fsdp": 2, "tensor": 4})
  rules = LogicalRules()
  assert rules.spec(("embed", "kv_heads", "head_dim"), (64, 2, 16), mesh) == P("fsdp", None,
                                                                               None)
  assert rules.spec(("batch", None), (6, 9), mesh) == P("fsdp", None)


def test_mesh_config():
  assert make_mesh(MeshConfig(1, -1, 1)).axis_names == ("data", "fsdp", "tensor")
  assert MeshConfig(2, -1, 2).shape(8) == (2, 2, 2)
  with pytest.raises(ValueError, match="needs 4 devices"):
    MeshConfig(2, 1, 2).shape(8)


@pytest.mark.slow
def test_sharded_equals_unsharded_on_8_cpu_devices(ckpt_root):
  script = pathlib.Path(__file__).with_name("sharded_check.py")
  root = pathlib.Path(__file__).parents[2]
  env = fake_devices.env(8, PYTHONPATH=str(root))
  paths = [str(tiny_hf.checkpoint(f, ckpt_root).path) for f in tiny_hf.FAMILIES]
  proc = subprocess.run([sys.executable, str(script), *paths], env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
  assert proc.stdout.strip().endswith("OK")
  assert jax.device_count() == 1  # the flag never reached this process
