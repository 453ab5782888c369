"""A full disk during a checkpoint save is one line: orbax's own error lines for the fault
are held back, while its lines about anything else still reach the log."""

import errno
import logging
import os

import jax.numpy as jnp
import pytest

from graft_jax.outputs import checkpoint, storage
from tests.train.test_faults import small_tmpfs  # noqa: F401  (a fixture)


def _records(caplog, name):
  return [r.getMessage() for r in caplog.records if r.name == name]


def test_lines_about_an_explained_disk_fault_are_dropped_others_pass(caplog):
  orbax = logging.getLogger("h4_orbax_like")
  with caplog.at_level(logging.INFO):
    with pytest.raises(OSError):
      with storage.quiet_unless_unexplained(orbax.name):
        orbax.error("RESOURCE_EXHAUSTED: thread raised")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert _records(caplog, orbax.name) == []
    with pytest.raises(ValueError):
      with storage.quiet_unless_unexplained(orbax.name):
        orbax.error("the real story")
        raise ValueError("not a disk fault")
    with storage.quiet_unless_unexplained(orbax.name):
      orbax.info("saved")
  assert _records(caplog, orbax.name) == ["the real story", "saved"]
  assert orbax.propagate and not orbax.handlers


def test_a_disk_that_fills_during_the_save_gives_one_line(small_tmpfs, capfd, caplog):
  ckpt = checkpoint.Checkpointer(small_tmpfs / "ck", every_steps=1, keep=3, async_save=False)
  st = os.statvfs(small_tmpfs)
  # Room for the state's bytes (the check before orbax passes), not for orbax's files.
  (small_tmpfs / "fill").write_bytes(b"x" * (st.f_bavail * st.f_frsize - 12 * 1024))
  capfd.readouterr()
  with caplog.at_level(logging.INFO), pytest.raises(storage.StorageError,
                                                    match="no space left on device"):
    ckpt.save(1, {"w": jnp.zeros(1000)}, {"step": 1})
  err = capfd.readouterr().err
  assert "RESOURCE_EXHAUSTED" not in err + caplog.text, err[:500]
  ckpt.close()
