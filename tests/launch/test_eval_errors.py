"""launch/eval.py: a missing model folder or benchmark file is one line, before the model loads."""

import subprocess
import sys

from tests.launch.conftest import REPO


def evaluate(*args):
  proc = subprocess.run([sys.executable, "launch/eval.py", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  return proc.returncode, proc.stdout + proc.stderr


def test_missing_model_folder(tmp_path):
  assert evaluate(f"--model={tmp_path / 'nope'}") == (
      2, f"path error: --model: no such folder '{tmp_path / 'nope'}' (expected a local Hugging "
      f"Face model folder: config.json, *.safetensors, tokenizer files)\n")


def test_missing_benchmark_files_are_listed_on_one_line(real_pair_files, tmp_path):
  code, out = evaluate(f"--model={real_pair_files['qwen3']}",
                       f"--config=configs/benchmarks.py:{real_pair_files['eval']}",
                       f"--config.benchmarks.AIME24={tmp_path / 'aime.jsonl'}",
                       f"--config.output={tmp_path / 'out.json'}")
  assert code == 2 and out == (
      f"path error: 1 benchmark file(s) not found: AIME24: {tmp_path / 'aime.jsonl'}; Point the "
      f"suite at local MATH-format .jsonl/.json/.parquet files, e.g. "
      f"--config=configs/benchmarks.py:/path/to/dir or "
      f"--config.benchmarks.MATH500=/path/to/math500.jsonl\n")
  assert not (tmp_path / "out.json").exists()
