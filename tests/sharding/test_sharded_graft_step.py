"""A GRAFT step on 8 fake CPU devices (data 2 x fsdp 4, fsdp 2 x tensor 2 with micro-batches)
equals the unsharded step, and every param and optimizer leaf keeps its intended sharding."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from tests import fake_devices

pytestmark = pytest.mark.slow  # three trainers, each compiling two policies' step
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  env = fake_devices.env(8, PYTHONPATH=str(ROOT))
  out = tmp_path_factory.mktemp("sharded")
  proc = subprocess.run([sys.executable, "-m", "tests.sharding.graft_step_script", str(out)],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stderr[-3000:]
  print(proc.stderr[-2000:])
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mesh", ["data2_fsdp4", "fsdp2_tensor2"])
def test_sharded_step_equals_unsharded(report, mesh):
  got = report["meshes"][mesh]
  assert sum(report["grafted"].values()) > 0  # the step really grafts
  assert got["m"] == report["m"] and got["grafted"] == report["grafted"]
  for name, loss in report["loss"].items():
    np.testing.assert_allclose(got["loss"][name], loss, rtol=1e-5, atol=1e-6)
  for name, diff in got["param_diff"].items():
    assert diff < 1e-5, (mesh, name, diff)


@pytest.mark.parametrize("mesh", ["data2_fsdp4", "fsdp2_tensor2"])
def test_every_leaf_has_its_intended_sharding(report, mesh):
  got = report["meshes"][mesh]
  for name, intended in got["intended"].items():
    for when in ("init", "after"):
      assert got[when][name]["params"] == intended["params"], (mesh, name, when)
      assert got[when][name]["opt"] == intended["opt"], (mesh, name, when)
    # Adam's two moments follow their parameters; something really is split.
    assert sum(s == p for s in intended["opt"] for p in intended["params"][:1]) >= 2
    assert any(s not in ("P()", "single") for s in intended["params"])
  # Written out by hand from the default rules: q (embed, q_heads, head_dim).
  assert got["q_proj_spec"] == {"data2_fsdp4": "P('fsdp', 'tensor', None)",
                                "fsdp2_tensor2": "P('fsdp', 'tensor', None)"}[mesh]
