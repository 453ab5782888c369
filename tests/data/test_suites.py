"""Benchmark suite configs and loading."""

import importlib.util
import json
import pathlib

import pytest

from graft_jax.data import PAPER_BENCHMARKS, load_suite, ordered

_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _config(arg=None):
  spec = importlib.util.spec_from_file_location(
      "benchmarks_config", _ROOT / "configs" / "benchmarks.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_config_lists_the_paper_suite_and_settings():
  cfg = _config("/data/bench")
  assert set(cfg.benchmarks) == set(PAPER_BENCHMARKS)
  assert cfg.benchmarks.AIME24 == "/data/bench/aime24.jsonl"
  assert (cfg.k, cfg.temperature, cfg.top_p) == (8, 0.6, 0.95)
  assert list(ordered(dict(cfg.benchmarks))) == list(PAPER_BENCHMARKS)


def test_missing_files_are_all_named(tmp_path):
  suite = dict(_config(str(tmp_path)).benchmarks)
  (tmp_path / "amc23.jsonl").write_text(json.dumps({"problem": "p", "answer": "1"}))
  with pytest.raises(FileNotFoundError) as err:
    load_suite(suite)
  msg = str(err.value)
  assert "4 benchmark file(s) not found" in msg
  for name in ["MATH500", "AIME24", "AIME25", "Minerva"]:
    assert f"{name}: {suite[name]}" in msg
  assert "AMC23" not in msg


def test_load_suite_uses_benchmark_names_as_sources(tmp_path):
  for name in ["a", "b"]:
    (tmp_path / f"{name}.jsonl").write_text(
        json.dumps({"problem": f"q{name}", "answer": "1"}) + "\n")
  suite = {"B": str(tmp_path / "b.jsonl"), "A": str(tmp_path / "a.jsonl")}
  problems, stats = load_suite(suite)
  assert list(problems) == ["B", "A"]
  assert problems["A"][0].source == "A" and stats["B"].loaded == 1


def test_empty_benchmark_is_an_error(tmp_path):
  (tmp_path / "e.jsonl").write_text("\n")
  with pytest.raises(ValueError, match="no problems loaded"):
    load_suite({"E": str(tmp_path / "e.jsonl")})
