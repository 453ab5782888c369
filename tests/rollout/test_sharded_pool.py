"""The slot pool with its slots split over a mesh's batch axes samples the tokens it
samples on one device, on the same schedule, in one program per sampling flag set
(8 fake CPU devices)."""

import numpy as np
import pytest

from tests.fake_devices import run_script


@pytest.fixture(scope="module")
def report():
  return run_script("tests.rollout.sharded_pool_script")


def _same(got, want):
  assert got["lengths"] == want["lengths"]
  assert got["tokens"] == want["tokens"]
  np.testing.assert_allclose(got["logp"], want["logp"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mesh,shards", [("data2_fsdp2", 4), ("fsdp2_tensor2", 2), ("data3", 3)])
def test_slots_are_split_and_sample_as_on_one_device(report, mesh, shards):
  got, want = report[mesh]["got"], report["want"]
  assert report[mesh]["row_shards"] == shards
  # The keys end responses at different lengths: slots are refilled mid-call.
  assert len(set(want["t1"]["lengths"])) > 2
  for label in ("t1", "topp"):
    _same(got[label], want[label])
    # One queue over the devices: the one-device schedule, step for step.
    assert got[label]["steps"] == want[label]["steps"]
    assert got[label]["occupancy"] == want[label]["occupancy"]
  _same(got["other"], want["other"])
  _same(got["again"], want["t1"])
  # Each device halves its own share: another schedule, the same tokens.
  _same(got["shrunk"], want["shrunk"])
  _same(got["batched"], want["t1"])  # refills that wait for 2 free slots per device
  assert report[mesh]["programs"] == 2
