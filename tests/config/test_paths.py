"""check_paths: output folders are usable and every input exists, before anything loads."""

import json
import subprocess

import pytest

from graft_jax.config import checks as config_checks
from graft_jax.config import run_config as config_lib
from graft_jax.train import methods
from tests.config.test_run_config import _with
from tests.train.test_faults import small_tmpfs  # noqa: F401  (a fixture)


def _models(tmp_path):
  for name in ('a', 'b'):
    (tmp_path / name).mkdir()
    (tmp_path / name / 'config.json').write_text('{}')
  return dict(model_a__path=str(tmp_path / 'a'), model_b__path=str(tmp_path / 'b'),
              data__source='synthetic', eval__suite=('synthetic',))


def _check(d, **kw):
  config_lib.check_paths(config_lib.from_config_dict(d), **kw)


@pytest.mark.parametrize('field', ['workdir', 'checkpoint.dir', 'logging.peer_log_dir'])
def test_an_output_folder_that_is_a_file(tmp_path, field):
  (tmp_path / 'f').write_text('x')
  d = _with(**_models(tmp_path), workdir=str(tmp_path / 'w'))
  d2 = d
  *parents, leaf = field.split('.')
  for p in parents:
    d2 = d2[p]
  d2[leaf] = str(tmp_path / 'f')
  with pytest.raises(config_lib.PathError, match=f"^{field}: '{tmp_path / 'f'}' is a file"):
    _check(d)
  d2[leaf] = str(tmp_path / 'f' / 'below')
  with pytest.raises(config_lib.PathError,
                     match=f"^{field}: cannot create '{tmp_path / 'f' / 'below'}': "
                           f"'{tmp_path / 'f'}' is a file"):
    _check(d)
  d2[leaf] = str(tmp_path / 'new' / 'deeper')  # creatable: fine, and nothing is created
  _check(d)
  assert not (tmp_path / 'new').exists()


def test_missing_model_folders_and_pending_ones(tmp_path):
  d = _with(**_models(tmp_path), workdir=str(tmp_path / 'w'))
  d['model_b']['path'] = str(tmp_path / 'toy' / 'model_b')
  with pytest.raises(config_lib.PathError, match=f"^model_b.path: no such folder "
                     f"'{tmp_path / 'toy' / 'model_b'}' \\(expected a local Hugging Face"):
    _check(d)
  _check(d, pending=[tmp_path / 'toy' / 'model_b'])  # built on first use
  d['model_a']['path'] = ''
  with pytest.raises(config_lib.PathError, match='^model_a.path: is not set'):
    _check(d, pending=[tmp_path / 'toy' / 'model_b'])


def test_replay_needs_the_peers_logs_not_its_folder(tmp_path):
  d = _with(**_models(tmp_path), workdir=str(tmp_path / 'w'), method='replay',
            replay__log_dir=str(tmp_path / 'logs'))
  d['model_b']['path'] = str(tmp_path / 'gone')  # the peer is its logs: never loaded
  cfg = methods.from_config_dict(d)
  with pytest.raises(config_lib.PathError, match='^replay.log_dir: no such file or folder'):
    methods.check_paths(cfg)
  (tmp_path / 'logs' / 'model_a').mkdir(parents=True)
  with pytest.raises(config_lib.PathError, match="^replay.log_dir: no peer logs of model_b.name "
                     "'model_b'"):
    methods.check_paths(cfg)
  (tmp_path / 'logs' / 'model_b').mkdir()
  methods.check_paths(cfg)
  with pytest.raises(config_lib.PathError, match='^model_b.path: no such folder'):
    config_lib.check_paths(cfg)  # every model's folder, without the method's say


def test_resolved_config_round_trips_through_json(tmp_path):
  cfg = config_lib.from_config_dict(config_lib.load_config('configs/toy.py:hacpo,no_gate'))
  path = config_lib.write_json(cfg, tmp_path / 'run' / 'config.json')
  assert config_lib.from_config_dict(json.loads(path.read_text())) == cfg


def test_a_read_only_mount_is_named_as_one(small_tmpfs):
  subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
  with pytest.raises(config_lib.PathError, match=r"\(read-only file system\)$"):
    config_checks.check_writable("workdir", str(small_tmpfs / "run"))
