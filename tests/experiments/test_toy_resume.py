"""A toy job's run resumes only a run of its own key (pair, step budget), checked first."""

import dataclasses
import json
import pathlib

import pytest

from graft_jax import toy
from graft_jax.config.checks import ConfigError
from graft_jax.experiments import toy_compare
from graft_jax.outputs import checkpoint


def _cfg(tmp_path, **fields):
  cfg = toy_compare.method_configs(toy.tiny_config(), workdir=tmp_path, seed=0,
                                   smoke=True)["graft"]
  return dataclasses.replace(cfg, **fields)


def _commit(cfg, step: int) -> pathlib.Path:
  """A step folder as a committed orbax save leaves it: what the resume check looks for."""
  folder = pathlib.Path(cfg.checkpoint_dir) / str(step)
  folder.mkdir(parents=True)
  (folder / checkpoint.COMMIT_MARKER).write_text("")
  return folder


def test_a_run_resumes_under_its_own_key_and_starts_over_under_another(tmp_path):
  cfg = _cfg(tmp_path)
  first = toy_compare.resume_or_start(cfg, "pairA-2")
  assert first.checkpoint.resume is False  # nothing started here yet
  assert json.loads((tmp_path / "graft" / toy_compare.STARTED_FILE).read_text()) == {
      "key": "pairA-2"}
  assert (tmp_path / "graft" / "config.json").is_file()
  step = _commit(cfg, 1)
  assert toy_compare.resume_or_start(cfg, "pairA-2").checkpoint.resume is True
  # checkpoint.resume=False (a --config flag) starts over even under the same key.
  off = dataclasses.replace(cfg, checkpoint=dataclasses.replace(cfg.checkpoint, resume=False))
  rows = tmp_path / "graft" / "metrics.jsonl"
  rows.write_text('{"step": 0}\n')
  assert toy_compare.resume_or_start(off, "pairA-2").checkpoint.resume is False
  assert not step.exists()  # its checkpoints would stand in for the new run's steps
  assert not rows.exists()  # and its rows would mix with the new run's
  _commit(cfg, 1)
  assert toy_compare.resume_or_start(cfg, "pairB-2").checkpoint.resume is False
  assert not step.exists()
  assert json.loads((tmp_path / "graft" / toy_compare.STARTED_FILE).read_text()) == {
      "key": "pairB-2"}


def test_a_resume_that_changes_the_math_is_refused_naming_the_field(tmp_path):
  cfg = _cfg(tmp_path)
  toy_compare.resume_or_start(cfg, "pairA-2")
  _commit(cfg, 1)
  other = dataclasses.replace(cfg, optimizer=dataclasses.replace(cfg.optimizer, lr=1e-2))
  with pytest.raises(ConfigError, match="optimizer.lr") as e:
    toy_compare.resume_or_start(other, "pairA-2")
  assert e.value.field == "optimizer.lr"
