"""Checkpoint integrity: a changed byte anywhere in a checkpoint is caught before a restore,
the damaged step is set aside (not deleted) and the previous good one restores; rotation
never deletes a good step before a newer good one exists."""

import logging
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax.outputs import checkpoint, checkpoint_manifest

FLIPS = 10


def _state(scale):
  return {"w": jnp.arange(4096, dtype=jnp.float32) * scale, "key": jax.random.key(3)}


def _abstract():
  return jax.eval_shape(lambda: _state(1.0))


def _files(step_dir):
  return sorted(p for p in step_dir.rglob("*") if p.is_file())


def _flip(path, offset):
  data = bytearray(path.read_bytes())
  data[offset] ^= 0xFF
  path.write_bytes(bytes(data))


@pytest.fixture
def two_steps(tmp_path):
  """A folder with committed, checksummed steps 1 and 2 (a pristine copy to flip in)."""
  good = tmp_path / "good"
  with checkpoint.Checkpointer(good, every_steps=1, keep=3, async_save=False) as ckpt:
    ckpt.save(1, _state(1.0), {"step": 1})
    ckpt.save(2, _state(2.0), {"step": 2})
  assert checkpoint_manifest.has_manifest(good / "2")
  return good


def test_bit_flips_in_random_places_are_all_caught_and_the_previous_step_restores(
    two_steps, tmp_path, caplog):
  rng = np.random.default_rng(0)
  files = _files(two_steps / "2")
  sizes = np.array([p.stat().st_size for p in files])
  # Places drawn uniformly over all the step's bytes, its manifest included.
  places = rng.choice(sizes.sum(), size=FLIPS, replace=False)
  caught = 0
  for i, place in enumerate(places):
    trial = tmp_path / f"trial{i}"
    shutil.copytree(two_steps, trial)
    f = int(np.searchsorted(np.cumsum(sizes), place, side="right"))
    _flip(trial / "2" / files[f].relative_to(two_steps / "2"), int(place - sizes[:f].sum()))
    caplog.clear()
    with caplog.at_level(logging.WARNING), \
         checkpoint.Checkpointer(trial, every_steps=1, keep=3) as ckpt:
      state, meta = ckpt.restore_latest(_abstract())
    if meta == {"step": 1}:
      caught += 1
      np.testing.assert_array_equal(state["w"], _state(1.0)["w"])
      aside = list(trial.glob("2.corrupt-*"))
      assert len(aside) == 1 and not (trial / "2").exists()
      lines = [r for r in caplog.records if "is damaged" in r.getMessage()]
      assert len(lines) == 1 and "\n" not in lines[0].getMessage()
  assert caught == FLIPS, f"{caught} of {FLIPS} flipped bytes were caught"


def test_a_truncated_file_falls_back_and_a_changed_one_is_named(two_steps, caplog):
  blob = max(_files(two_steps / "2"), key=lambda p: p.stat().st_size)
  blob.write_bytes(blob.read_bytes()[:-100])
  with caplog.at_level(logging.WARNING), \
       checkpoint.Checkpointer(two_steps, every_steps=1, keep=3) as ckpt:
    assert ckpt.restore_latest(_abstract())[1] == {"step": 1}
  name = str(blob.relative_to(two_steps / "2"))
  assert f"({name} is " in caplog.text and " when saved)" in caplog.text


def test_rotation_keeps_the_last_good_steps_and_never_the_set_aside_ones(two_steps):
  _flip(_files(two_steps / "2")[-1], 0)
  with checkpoint.Checkpointer(two_steps, every_steps=1, keep=2, async_save=False) as ckpt:
    assert ckpt.restore_latest(_abstract())[1] == {"step": 1}
    # Step 1 stays until a newer good step exists; the damaged 2 is kept aside.
    assert ckpt.steps() == [1]
    ckpt.save(2, _state(2.0), {"step": 2})
    assert ckpt.steps() == [1, 2]
    ckpt.save(3, _state(3.0), {"step": 3})
    assert ckpt.steps() == [2, 3]
  assert len(list(two_steps.glob("2.corrupt-*"))) == 1


def test_async_saves_get_their_checksums_when_they_commit(tmp_path):
  with checkpoint.Checkpointer(tmp_path, every_steps=1, keep=2, async_save=True) as ckpt:
    for step in (1, 2, 3):
      ckpt.save(step, _state(float(step)), {"step": step})
    assert ckpt.steps() == [2, 3]
  assert all(checkpoint_manifest.verify(tmp_path / s) is None for s in ("2", "3"))


def test_a_step_saved_before_checksums_restores_with_one_warning(two_steps, caplog):
  (two_steps / "2" / checkpoint_manifest.MANIFEST).unlink()
  with caplog.at_level(logging.WARNING), \
       checkpoint.Checkpointer(two_steps, every_steps=1, keep=3) as ckpt:
    assert ckpt.restore_latest(_abstract())[1] == {"step": 2}
  assert "has no checksums" in caplog.text


def test_when_every_step_is_damaged_the_run_stops_instead_of_starting_over(two_steps):
  for step in ("1", "2"):
    _flip(_files(two_steps / step)[0], 0)
  with checkpoint.Checkpointer(two_steps, every_steps=1, keep=3) as ckpt:
    with pytest.raises(checkpoint.CheckpointError,
                       match=r"^every checkpoint in .* failed its checksums \(1\.corrupt-\d+, "
                             r"2\.corrupt-\d+\); rename one back"):
      ckpt.restore_latest(_abstract())
