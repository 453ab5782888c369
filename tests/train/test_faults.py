"""Faults of the files a run writes: torn, deleted or replaced metrics, orbax leftovers, full disks.

A full disk is a real one for the writer under test: the file size limit is
set to 0 (``ulimit -f 0``) around the write, so Python and tensorstore both
fail inside their own write calls with EFBIG, as they would with ENOSPC.
"""

import contextlib
import errno
import json
import logging
import os
import resource
import signal
import subprocess
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax.data import DataError
from graft_jax.outputs import checkpoint
from graft_jax.train import run_inputs
from graft_jax.outputs import metrics_file
from graft_jax.outputs import storage
from graft_jax.outputs.metrics_writer import MetricsWriter, read_jsonl


@contextlib.contextmanager
def disk_full():
  """Every write that grows a file fails with EFBIG until the block exits."""
  soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
  handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
  resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
  try:
    yield
  finally:
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    signal.signal(signal.SIGXFSZ, handler)


def _writer(workdir, initial_step=0):
  return MetricsWriter(workdir, initial_step=initial_step, tensorboard=False, progress_bar=False)


def _steps(path):
  return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_a_torn_last_line_is_dropped_with_a_warning_naming_the_file(tmp_path, caplog):
  with _writer(tmp_path) as w:
    w.write(0, {"x": 0})
    w.write(1, {"x": 1})
  path = tmp_path / "metrics.jsonl"
  with open(path, "a") as f:
    f.write('{"step": 2, "x": "cut he')  # a kill half-way through step 2's row
  with caplog.at_level(logging.WARNING):
    assert [r["x"] for r in read_jsonl(path)] == [0, 1]
  assert f"{path}: leaving out its last line, torn" in caplog.text
  caplog.clear()
  # The resumed run (checkpoint after step 2) drops it and writes step 2 again.
  with caplog.at_level(logging.WARNING), _writer(tmp_path, initial_step=2) as w:
    w.write(2, {"x": 2})
  assert f"{path}: dropping its last line, torn" in caplog.text
  assert _steps(path) == [0, 1, 2]


def test_a_damaged_row_before_the_last_names_file_and_line(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 0}\n{"step": 1, oops\n{"step": 2}\n')
  with pytest.raises(DataError, match=rf"{path}: line 2: field '<json>': not a metrics row"):
    read_jsonl(path)
  path.write_text('{"step": 0}\n["not", "a", "row"]\n{"step": 2}\n')
  with pytest.raises(DataError, match="line 2.*integer 'step'"):
    _writer(tmp_path, initial_step=3)


def test_a_deleted_metrics_file_is_recreated_whole(tmp_path, caplog):
  path = tmp_path / "metrics.jsonl"
  with _writer(tmp_path) as w:
    for step in range(3):
      w.write(step, {"x": step})
    path.unlink()  # e.g. a cleanup script while the run trains
    with caplog.at_level(logging.WARNING):
      w.write(3, {"x": 3})
  assert f"{path} was deleted while the run wrote it" in caplog.text
  assert _steps(path) == [0, 1, 2, 3]


def test_a_replaced_metrics_file_is_kept_aside_and_recreated(tmp_path, caplog):
  path = tmp_path / "metrics.jsonl"
  with _writer(tmp_path) as w:
    w.write(0, {"x": 0})
    path.rename(tmp_path / "moved.jsonl")
    path.write_text("someone else's file\n")
    with caplog.at_level(logging.WARNING):
      w.write(1, {"x": 1})
  assert f"{path} was replaced while the run wrote it" in caplog.text
  aside = list(tmp_path.glob("metrics.jsonl.replaced-*"))
  assert len(aside) == 1 and aside[0].read_text() == "someone else's file\n"
  assert _steps(path) == [0, 1]


def test_steps_a_checkpoint_covers_but_the_file_lacks_are_named(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (3, 4, 7, 9)))
  kept = metrics_file.repair(path, first_step=8)
  assert [r["step"] for r, _ in kept] == [3, 4, 7] and _steps(path) == [3, 4, 7]
  assert metrics_file.missing_steps(kept, 8) == "0-2, 5-6"
  assert metrics_file.missing_steps(kept[:0], 0) == ""


def test_a_full_disk_during_a_metrics_write_names_the_file_and_keeps_the_rows(tmp_path):
  path = tmp_path / "metrics.jsonl"
  w = _writer(tmp_path)
  w.write(0, {"x": 0})
  with disk_full(), pytest.raises(storage.StorageError) as err:
    w.write(1, {"x": 1})
  w.close()
  assert str(err.value).startswith(f"cannot write {path}: file size limit exceeded")
  assert err.value.errno == errno.EFBIG and err.value.path == str(path)
  assert _steps(path) == [0]
  with _writer(tmp_path, initial_step=1) as w:  # space again: the rerun goes on
    w.write(1, {"x": 1})
  assert _steps(path) == [0, 1]


def _state(scale):
  return {"w": jnp.arange(64, dtype=jnp.float32) * scale, "key": jax.random.key(3)}


def test_a_full_disk_during_a_checkpoint_save_names_the_folder_and_restart_cleans_up(
    tmp_path, caplog):
  ckpt = checkpoint.Checkpointer(tmp_path, every_steps=1, keep=3, async_save=False)
  ckpt.save(1, _state(1.0), {"step": 1})
  with disk_full(), pytest.raises(storage.StorageError) as err:
    ckpt.save(2, _state(2.0), {"step": 2})
  ckpt.close()  # quiet: the failure was reported once, above
  assert str(err.value).startswith(f"cannot write {tmp_path}")
  assert "file size limit exceeded" in str(err.value)
  leftovers = list(tmp_path.glob(f"2{checkpoint.TMP_MARKER}*"))
  assert leftovers, "orbax left no temporary of the failed save; the test lost its point"
  with caplog.at_level(logging.WARNING):
    ckpt = checkpoint.Checkpointer(tmp_path, every_steps=1, keep=3, async_save=False)
  assert not list(tmp_path.glob(f"*{checkpoint.TMP_MARKER}*"))
  assert f"removing {leftovers[0]}" in caplog.text
  state, meta = ckpt.restore_latest(jax.eval_shape(lambda: _state(1.0)))
  assert meta == {"step": 1}
  np.testing.assert_array_equal(state["w"], _state(1.0)["w"])
  assert ckpt.save(2, _state(2.0), {"step": 2}) and ckpt.steps() == [1, 2]
  ckpt.close()


def test_a_leftover_orbax_temporary_is_removed_at_restart(tmp_path):
  with checkpoint.Checkpointer(tmp_path, every_steps=1, keep=3) as ckpt:
    ckpt.save(1, _state(1.0), {"step": 1})
  leftover = tmp_path / f"2{checkpoint.TMP_MARKER}-1700000000"
  (leftover / "state").mkdir(parents=True)
  (leftover / "state" / "blob").write_bytes(b"\0" * 4096)
  with checkpoint.Checkpointer(tmp_path, every_steps=1, keep=3) as ckpt:
    assert not leftover.exists() and ckpt.steps() == [1]
    assert ckpt.save(2, _state(2.0), {"step": 2})


def test_disk_faults_are_recognised_through_wrappers_and_name_the_path(tmp_path):
  plain = OSError(errno.ENOSPC, "No space left on device", "/data/run/metrics.jsonl")
  got = storage.as_storage_error(plain, tmp_path)
  assert got.path == "/data/run/metrics.jsonl" and "no space left on device" in str(got)
  # tensorstore's form (from a real orbax save on a full tmpfs), wrapped as orbax does.
  tensorstore = ValueError(
      'RESOURCE_EXHAUSTED: Error writing "w/0" in OCDBT database at local file '
      '"/mnt/ck/3.orbax-checkpoint-tmp/state/ocdbt.process_0/": Failed to write 306495 bytes '
      "to file 7: No space left on device [os_error_code='28']")
  try:
    try:
      raise tensorstore
    except ValueError as e:
      raise RuntimeError("save failed") from e
  except RuntimeError as wrapped:
    got = storage.as_storage_error(wrapped, tmp_path)
  assert got.path == "/mnt/ck/3.orbax-checkpoint-tmp/state/ocdbt.process_0/"
  assert got.errno == errno.ENOSPC
  readonly = storage.as_storage_error(OSError(errno.EROFS, "Read-only file system"), tmp_path)
  assert readonly.path == str(tmp_path) and "read-only file system" in str(readonly)
  assert storage.as_storage_error(OSError(errno.ENOENT, "gone"), tmp_path) is None
  assert storage.as_storage_error(ValueError("os_error_code='2'"), tmp_path) is None


def test_an_unwritable_workdir_stops_the_run_before_any_model_loads(tmp_path):
  class Cfg:
    workdir = str(tmp_path / "run")
  with disk_full(), pytest.raises(storage.StorageError, match=f"cannot write {tmp_path}/run"):
    run_inputs.check_workdir(Cfg)
  assert not list((tmp_path / "run").iterdir())  # the probe is gone
  run_inputs.check_workdir(Cfg)


@pytest.fixture
def small_tmpfs(tmp_path):
  """A 256 KiB tmpfs (needs mount rights, e.g. root in a container; skipped elsewhere)."""
  mnt = tmp_path / "mnt"
  mnt.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                    capture_output=True).returncode:
    pytest.skip("cannot mount a tmpfs here")
  try:
    yield mnt
  finally:
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_checkpoint_that_cannot_fit_is_refused_before_orbax_writes(small_tmpfs, capfd):
  ckpt = checkpoint.Checkpointer(small_tmpfs / "ck", every_steps=1, keep=3, async_save=False)
  big = {"w": jax.random.normal(jax.random.key(0), (100_000,))}  # 400 KB > 256 KiB
  with pytest.raises(storage.StorageError, match=rf"cannot write {small_tmpfs}/ck: no space left "
                     r"on device for checkpoint 1 \(needs up to 400,000 bytes"):
    ckpt.save(1, big, {"step": 1})
  ckpt.close()
  assert not list((small_tmpfs / "ck").iterdir())  # orbax never started
  assert "Traceback" not in capfd.readouterr().err
  subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
  with checkpoint.Checkpointer(small_tmpfs / "ck", every_steps=1, keep=3) as ckpt:
    with pytest.raises(storage.StorageError, match="read-only file system"):
      ckpt.save(1, _state(1.0), {})


def test_free_space_is_read_from_the_file_system(tmp_path, monkeypatch):
  real = os.statvfs(tmp_path)
  fake = types.SimpleNamespace(f_flag=real.f_flag, f_frsize=4096, f_bavail=2)
  monkeypatch.setattr(os, "statvfs", lambda path: fake)
  with pytest.raises(storage.StorageError, match=r"needs up to 8,193 bytes, 8,192 free"):
    storage.require_space(tmp_path, 8193, "x")
  storage.require_space(tmp_path, 8192, "x")


def test_a_row_cut_just_before_its_newline_is_kept_and_the_next_starts_a_line(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 0}\n{"step": 1}')
  with _writer(tmp_path, initial_step=2) as w:
    w.write(2, {"x": 2})
  assert _steps(path) == [0, 1, 2]


def test_a_resumed_run_tells_tensorboard_to_hide_the_abandoned_steps(tmp_path):
  from tensorboardX.proto import event_pb2
  with MetricsWriter(tmp_path, initial_step=2, progress_bar=False) as w:
    w.write(2, {"x": 2.0})
  data = next((tmp_path / "tensorboard").glob("events*")).read_bytes()
  starts = []
  while data:  # TFRecord framing: u64 length, u32 crc, payload, u32 crc
    n = int.from_bytes(data[:8], "little")
    event = event_pb2.Event.FromString(data[12:12 + n])
    data = data[12 + n + 4:]
    if event.HasField("session_log"):
      starts.append((event.step, event.session_log.status))
  # TensorBoard drops earlier events of steps >= a START's step.
  assert starts == [(2, event_pb2.SessionLog.START)]
