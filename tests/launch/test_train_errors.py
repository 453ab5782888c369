"""Every mistake in the issue's table is one line on the console and a non-zero exit,
before any model loads (nothing is written to the workdir)."""

import subprocess
import sys

import pytest

from graft_jax.config import run_config as config_lib
from tests.launch.conftest import REPO

BASE = config_lib.import_config_file(REPO / "configs" / "base.py")
HF_FOLDER = "a local Hugging Face model folder: config.json, *.safetensors, tokenizer files"


def train(*args, env=None):
  """(exit code, everything printed) of launch/train.py."""
  proc = subprocess.run([sys.executable, "launch/train.py", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)
  return proc.returncode, proc.stdout + proc.stderr


def test_unknown_preset_names_the_closest(tmp_path):
  code, out = train("--config=configs/toy.py:grafft", f"--workdir={tmp_path / 'w'}")
  assert out == (f"config error: configs/toy.py:grafft: unknown config preset 'grafft' "
                 f"(did you mean 'graft'?); known: {', '.join(BASE.PRESETS)}\n")
  assert code == 2 and not (tmp_path / "w").exists()


def test_unknown_field_names_the_closest(tmp_path):
  code, out = train("--config.optimizer.lrr=1", f"--workdir={tmp_path / 'w'}")
  assert out == ("config error: --config.optimizer.lrr=1: no config field 'optimizer.lrr' "
                 "(did you mean 'optimizer.lr'?)\n")
  assert code == 2 and not (tmp_path / "w").exists()


def test_impossible_value_names_the_field_and_the_flag(tmp_path):
  code, out = train("--config.optimizer.lr=-1e-4", f"--workdir={tmp_path / 'w'}")
  # The flag as config_flags read it: the value the run got.
  assert out == ("config error: optimizer.lr must be > 0, got -0.0001 "
                 "(from --config.optimizer.lr=-0.0001)\n")
  assert code == 2 and not (tmp_path / "w").exists()


def test_missing_model_folder(tmp_path):
  missing = tmp_path / "no_model"
  code, out = train(f"--config.model_a.path={missing}", f"--workdir={tmp_path / 'w'}")
  assert out == f"path error: model_a.path: no such folder '{missing}' (expected {HF_FOLDER})\n"
  assert code == 2 and not (tmp_path / "w").exists()


def test_workdir_that_is_a_file(tmp_path):
  file = tmp_path / "a_file"
  file.write_text("not a folder")
  code, out = train(f"--workdir={file}")
  assert out == f"path error: workdir: '{file}' is a file, not a folder\n"
  assert code == 2 and file.read_text() == "not a folder"


def test_missing_validation_benchmarks_name_the_field(real_pair_files, tmp_path):
  """The README's real-pair example without its eval.data_dir (the table's last row)."""
  code, out = train("--config=configs/pair_smollm3_qwen3.py:graft",
                    f"--config.model_a.path={real_pair_files['smollm3']}",
                    f"--config.model_b.path={real_pair_files['qwen3']}",
                    f"--config.data.train_path={real_pair_files['train']}",
                    f"--workdir={tmp_path / 'w'}")
  assert out == ("path error: eval.data_dir: no such folder 'data/eval'; it holds the validation "
                 "benchmarks math500, aime24, aime25, amc23, minerva as <name>.jsonl (or .json, "
                 ".parquet), or set eval.every_steps=0 to train without validation\n")
  assert code == 2


@pytest.mark.parametrize("args,line", [
    (["--stpes=3"], "usage error: Unknown command line flag 'stpes'. Did you mean: steps ?"),
    (["graft"], "usage error: unexpected argument 'graft' (flags look like --name=value)"),
    (["--config.n=abc"], "config error: --config.n=abc: n must be int, got 'abc'"),
    (["--config.graft.order=last"], "config error: graft.order must be one of peer_last, "
     "peer_first, uniform, got 'last' (did you mean 'peer_last'?) "
     "(from --config.graft.order=last)"),
], ids=["flag", "argument", "type", "enum"])
def test_command_line_mistakes(args, line, tmp_path):
  assert train(*args, f"--workdir={tmp_path / 'w'}") == (2, line + "\n")


def test_verbose_shows_the_traceback(tmp_path):
  code, out = train("--config.optimizer.lr=-1e-4", "--verbose", f"--workdir={tmp_path / 'w'}")
  assert code == 1 and "Traceback (most recent call last)" in out
  assert out.rstrip().endswith("ConfigError: optimizer.lr must be > 0, got -0.0001")
