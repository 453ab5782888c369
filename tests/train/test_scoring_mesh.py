"""Scoring on 4 fake CPU devices (FSDP): each device scores its own rows (the compiled
scorer's ids and mask are split over the mesh's batch axes), chunks hold the per-device
token budget times the devices, and the values equal one-device scoring."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from tests import fake_devices

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report():
  env = fake_devices.env(4, PYTHONPATH=str(ROOT))
  proc = subprocess.run([sys.executable, "-m", "tests.train.scoring_mesh_script"], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_compiled_scorer_splits_rows_over_the_devices(report):
  assert report["shards"] == 4
  # Rows over the batch rule (data x fsdp; data has size 1 here), tokens whole.
  assert report["in_specs"] == ["P(('data', 'fsdp'), None)"] * 2


def test_chunks_hold_the_per_device_budget_on_every_device(report):
  # 11 rows of 238 tokens, the longest 35, pack into rows of 48 tokens; a 128-token
  # budget fits 2 of them per device, so a call is 2 x 4 = 8 rows of 384 tokens in
  # all: one call.
  assert report["calls"] == [[8, 48]]


def test_sharded_scoring_equals_one_device(report):
  assert len(report["got"]) == len(report["want"]) == 11
  for got, want in zip(report["got"], report["want"]):
    assert len(got) == len(want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_result_comes_back_whole(report):
  assert report["whole_shape"][0] == report["calls"][0][0]


def test_a_batch_the_devices_cannot_split_is_scored_whole(report):
  np.testing.assert_allclose(report["one"], report["one_want"], rtol=1e-5, atol=1e-5)
