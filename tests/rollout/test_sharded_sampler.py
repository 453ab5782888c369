"""The JAX sampler with its prompts split over a mesh's batch axes samples what it samples
on one device, and each device holds only its share of the rows (8 fake CPU devices)."""

import numpy as np
import pytest

from tests.fake_devices import run_script

pytestmark = pytest.mark.slow  # three meshes, each compiling the sampler a few times


@pytest.fixture(scope="module")
def report():
  return run_script("tests.rollout.sharded_sampler_script")


def _same(got, want):
  assert got["tokens"] == want["tokens"]
  np.testing.assert_allclose(got["logp"], want["logp"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mesh,shards", [("data2_fsdp2", 4), ("fsdp2_tensor2", 2), ("data3", 3)])
def test_rows_are_split_and_sample_as_on_one_device(report, mesh, shards):
  got = report[mesh]
  assert got["row_shards"] == shards
  assert got["decode_attention"] == {"sharded": "xla", "model": "auto"}
  assert got["shard_rows"] * shards == got["rows"]  # each device holds its share of rows
  for label in ("whole", "chunked"):
    _same(got[label]["0.0"], got["want"]["0.0"])  # greedy: the same tokens everywhere
    # Sampling draws each row's number from the call's row count: with a power-of-two
    # split the prompt bucket is the one-device one (8), and the draws are the same.
    if mesh != "data3":
      _same(got[label]["1.0"], got["want"]["1.0"])
  # A split of 3 pads the bucket to 9 prompts: chunks still sample what one call does.
  _same(got["chunked"]["1.0"], got["whole"]["1.0"])
