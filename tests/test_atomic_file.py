"""The one writer of whole small files: old contents or new, never half."""

import os

import pytest

from graft_jax.atomic_file import write_atomically


def test_writes_text_and_bytes_and_leaves_no_temporary(tmp_path):
  path = tmp_path / 'config.json'
  write_atomically(path, 'é\n')
  assert path.read_bytes() == 'é\n'.encode('utf-8')
  write_atomically(path, b'\x00\x01')
  assert path.read_bytes() == b'\x00\x01'
  assert sorted(os.listdir(tmp_path)) == ['config.json']


def test_a_failed_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
  path = tmp_path / 'metrics.jsonl'
  path.write_text('old\n')

  def no_space(fd):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(os, 'fsync', no_space)
  with pytest.raises(OSError, match='No space'):
    write_atomically(path, 'new\n')
  assert path.read_text() == 'old\n'
  assert sorted(os.listdir(tmp_path)) == ['metrics.jsonl']
