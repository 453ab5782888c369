"""Fixtures for the launcher tests: tiny stand-in Hugging Face folders and MATH-format files."""

import json
import pathlib
import sys

import pytest

# tests/models has no package; the checkpoint helpers live there.
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "models"))
import tiny_hf  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = ("math500", "aime24", "aime25", "amc23", "minerva")


def write_problems(path: pathlib.Path, num: int) -> pathlib.Path:
  rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(num)]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  return path


@pytest.fixture(scope="session")
def real_pair_files(tmp_path_factory):
  """``{'smollm3': dir, 'qwen3': dir, 'train': file, 'eval': dir}``: stand-ins for the
  README's real-pair paths (random tiny models with a word-level tokenizer)."""
  root = tmp_path_factory.mktemp("real_pair")
  out = {}
  for family in ("smollm3", "qwen3"):
    out[family] = root / family
    tiny_hf.save_hf_model(family, out[family])
    tiny_hf.make_tokenizer(out[family])
  out["train"] = write_problems(root / "train.jsonl", 16)
  out["eval"] = root / "eval"
  out["eval"].mkdir()
  for name in BENCHMARKS:
    write_problems(out["eval"] / f"{name}.jsonl", 2)
  return out
