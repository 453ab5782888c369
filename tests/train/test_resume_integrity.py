"""A run whose newest checkpoint was damaged on disk resumes from the one before it, and
takes the lost step again."""

import logging

import numpy as np
import pytest

from graft_jax.outputs import checkpoint_manifest
from graft_jax.outputs.metrics_writer import read_jsonl
from tests.train.test_nonfinite import _trainer

pytestmark = pytest.mark.slow


def test_a_flipped_checkpoint_is_set_aside_and_the_run_resumes_from_the_previous(
    tmp_path, caplog):
  t = _trainer(tmp_path)
  t.run(2)
  t.close()
  ckpts = tmp_path / "checkpoints"
  assert checkpoint_manifest.verify(ckpts / "2") is None
  blob = max((p for p in (ckpts / "2").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
  data = bytearray(blob.read_bytes())
  rng = np.random.default_rng(1)
  for place in rng.choice(len(data), size=10, replace=False):
    data[place] ^= 0x55
  blob.write_bytes(bytes(data))  # same size, 10 bytes changed

  with caplog.at_level(logging.WARNING):
    t = _trainer(tmp_path)
  assert t.step == 1
  assert len([r for r in caplog.records if "is damaged" in r.getMessage()]) == 1
  rows = t.run(3)
  t.close()
  assert [r["step"] for r in rows] == [1, 2]
  assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2]
  assert len(list(ckpts.glob("2.corrupt-*"))) == 1
  assert all(checkpoint_manifest.verify(ckpts / s) is None for s in ("1", "2", "3"))
