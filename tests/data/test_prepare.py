"""launch/prepare_data.py on small copies of the real dataset repos, offline.

Each repo is cached as huggingface_hub writes a dataset snapshot, with the files and
columns of the real one (``SOURCES``: MATH-500's test.jsonl with problem, solution,
answer, subject, level, unique_id; hendrycks_math's <subject>/train-*.parquet without
an answer column; ...); huggingface_hub resolves them offline, the real conversion
and the reward's own answer check run. The column layouts are the ones the
datasets' cards give; the real repos' row counts and hashes cannot be checked here.
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import constants

from graft_jax.data import load_problems, prepare
from tests.models import hub_cache

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {s.name: s for s in prepare.SOURCES}


def _jsonl(path: Path, rows) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _parquet(path: Path, rows) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows), path)


def _math_row(i, answer):
  return {"problem": f"Compute problem {i}.", "level": f"Level {1 + i % 5}", "type": "Algebra",
          "solution": f"Work. The answer is $\\boxed{{{answer}}}$."}


def repos(n: dict, odd: dict | None = None) -> dict:
  """{source name: (files as the repo holds them)} with ``n[name]`` rows each; ``odd``
  replaces some rows' answers: {name: {row: answer}}."""
  odd = odd or {}
  ans = lambda name, i, default: odd.get(name, {}).get(i, default)  # noqa: E731
  return {
      "MATH train": {f"{sub}/train-00000-of-00001.parquet": [
          _math_row(i, ans("MATH train", i, f"\\frac{{{i}}}{{{i + 1}}}"))
          for i in range(k, n["MATH train"], 2)] for k, sub in enumerate(("algebra", "geometry"))},
      "MATH500": {"test.jsonl": [
          {"problem": f"Find x{i}.", "solution": "So $\\boxed{3}$.", "answer": ans("MATH500", i, "\\text{(C)}"),
           "subject": "Precalculus", "level": 3, "unique_id": f"test/precalculus/{i}.json"}
          for i in range(n["MATH500"])]},
      "AIME24": {"data/train-00000-of-00001.parquet": [
          {"id": 60 + i, "problem": f"AIME {i}", "solution": "...", "answer": ans("AIME24", i, "204"),
           "url": "https://artofproblemsolving.com", "year": "2024"} for i in range(n["AIME24"])]},
      "AIME25": {"test.jsonl": [{"problem": f"AIME25 {i}", "answer": ans("AIME25", i, "70"), "id": str(i)}
                                for i in range(n["AIME25"])]},
      "AMC23": {"test.jsonl": [{"id": i, "question": f"AMC {i}", "answer": ans("AMC23", i, 27.0),
                                "url": "https://artofproblemsolving.com"} for i in range(n["AMC23"])]},
      "Minerva": {"test.jsonl": [{"question": f"Minerva {i}", "answer": ans("Minerva", i, "4.5e33")}
                                 for i in range(n["Minerva"])]},
  }


def cache_repos(cache: Path, tmp: Path, files: dict) -> dict:
  """Caches each source's files as its repo; returns {name: commit}."""
  commits = {}
  for name, repo_files in files.items():
    folder = tmp / "repos" / name.replace(" ", "_")
    for rel, rows in repo_files.items():
      (_parquet if rel.endswith(".parquet") else _jsonl)(folder / rel, rows)
    commits[name] = hub_cache.add_snapshot(cache, SOURCES[name].repo, folder, repo_type="dataset")
  return commits


@pytest.fixture
def offline(tmp_path, monkeypatch):
  cache = tmp_path / "hf_home" / "hub"
  cache.mkdir(parents=True)
  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
  return cache


SMALL = {"MATH train": 6, "MATH500": 3, "AIME24": 2, "AIME25": 2, "AMC23": 2, "Minerva": 2}


def _small(name):
  return dataclasses.replace(SOURCES[name], rows=SMALL[name])


@pytest.mark.parametrize("name, want", [
    ("MATH train", ["0", "\\frac{2}{3}", "\\frac{4}{5}"]),  # the last \boxed{} of the solution
    ("MATH500", ["\\text{(C)}"] * 3),
    ("AIME24", ["204", "204"]),
    ("AIME25", ["70", "70"]),
    ("AMC23", ["27", "27"]),  # a float column: 27.0 is 27
    ("Minerva", ["4.5e33", "4.5e33"]),
])
def test_each_benchmarks_answers_become_what_the_reward_reads(offline, tmp_path, name, want):
  commits = cache_repos(offline, tmp_path, repos(SMALL, {"MATH train": {0: "$0$"}}))
  done = prepare.prepare(_small(name), tmp_path / "data")
  assert (done.commit, done.dropped, done.skipped) == (commits[name], {}, False)
  rows = [json.loads(line) for line in done.path.read_text().splitlines()]
  assert [r["answer"] for r in rows][:3] == want
  problems, stats = load_problems(done.path)  # the trainer's own loader reads it
  assert len(problems) == SMALL[name] and stats.num_skipped == 0
  assert problems[0].answer == want[0]
  if name == "MATH train":
    assert problems[0].family == "Algebra" and problems[0].difficulty == 1
    assert {r["id"] for r in rows} >= {"algebra/train-00000-of-00001.parquet row 1"}
  if name == "MATH500":
    assert rows[0]["id"] == "test/precalculus/0.json" and problems[0].difficulty == 3


def test_rows_the_reward_cannot_read_are_left_out_and_named(offline, tmp_path):
  cache_repos(offline, tmp_path, repos(SMALL, {"MATH500": {0: "\\frac{1}{2", 2: "\\text{}"}}))
  done = prepare.prepare(_small("MATH500"), tmp_path / "data")
  assert done.rows == 1 and done.dropped == {
      "test/precalculus/0.json": "answer '\\\\frac{1}{2' has unbalanced braces",
      "test/precalculus/2.json": "answer '\\\\text{}': unparseable"}
  manifest = prepare.read_manifest(tmp_path / "data")
  assert manifest["MATH500"]["dropped"] == done.dropped and manifest["MATH500"]["rows"] == 1


def test_a_solution_without_a_box_is_named_by_where_it_stands(offline, tmp_path):
  files = repos(SMALL)
  files["MATH train"]["geometry/train-00000-of-00001.parquet"][0]["solution"] = "No box."
  cache_repos(offline, tmp_path, files)
  done = prepare.prepare(_small("MATH train"), tmp_path / "data")
  assert done.dropped == {"geometry/train-00000-of-00001.parquet row 1":
                          "no answer, and no \\boxed{} in its solution"}


def test_a_wrong_row_count_is_one_line_and_writes_nothing(offline, tmp_path):
  commits = cache_repos(offline, tmp_path, repos(SMALL))
  wrong = dataclasses.replace(SOURCES["MATH500"], rows=500)
  with pytest.raises(prepare.PrepareError) as e:
    prepare.prepare(wrong, tmp_path / "data")
  assert str(e.value) == (f"MATH500: HuggingFaceH4/MATH-500@{commits['MATH500']} has 3 rows, "
                          "expected 500: not the split the paper evaluates; nothing written")
  assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*"))


def test_a_pinned_hash_that_differs_writes_nothing(offline, tmp_path):
  cache_repos(offline, tmp_path, repos(SMALL))
  pinned = dataclasses.replace(_small("AIME25"), sha256="0" * 64)
  with pytest.raises(prepare.PrepareError, match=r"^AIME25: content sha256 [0-9a-f]{64} differs "
                     r"from the pinned 0{64}; nothing written$"):
    prepare.prepare(pinned, tmp_path / "data")
  assert not (tmp_path / "data" / "eval" / "aime25.jsonl").exists()
  right = prepare.read_manifest(tmp_path / "data")  # nothing recorded either
  assert right == {}
  done = prepare.prepare(_small("AIME25"), tmp_path / "data")
  digest = prepare.read_manifest(tmp_path / "data")["AIME25"]["sha256"]
  again = dataclasses.replace(_small("AIME25"), sha256=digest)
  (tmp_path / "data" / "prepared.json").unlink()
  assert prepare.prepare(again, tmp_path / "data").path == done.path  # the pin holds


def test_a_missing_column_is_one_line(offline, tmp_path):
  files = repos(SMALL)
  for row in files["AMC23"]["test.jsonl"]:
    row["problem"] = row.pop("question")
  cache_repos(offline, tmp_path, files)
  with pytest.raises(prepare.PrepareError, match=r"^AMC23: no question column \(problem\) in "
                     r"math-ai/amc23; it has answer, id, problem, url$"):
    prepare.prepare(_small("AMC23"), tmp_path / "data")


def test_nothing_cached_offline_is_one_line(offline, tmp_path):
  with pytest.raises(prepare.PrepareError, match=r"^AIME24: HuggingFaceH4/aime_2024@main is not in the "
                     r"Hugging Face cache .* run once with network access to download it$"):
    prepare.prepare(_small("AIME24"), tmp_path / "data")


def test_the_launcher_prepares_every_file_then_verifies_and_skips(tmp_path):
  """The real sources at their real row counts, in a fresh process that reads HF_HOME
  and HF_HUB_OFFLINE as a user sets them; then a rerun, then a damaged file."""
  full = {s.name: s.rows for s in prepare.SOURCES}
  commits = cache_repos(tmp_path / "hf_home" / "hub", tmp_path,
                        repos(full, {"Minerva": {5: "\\text{}"}}))
  env = dict(os.environ, HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1")
  run = lambda: subprocess.run(  # noqa: E731
      [sys.executable, "launch/prepare_data.py", "--root", str(tmp_path / "data")],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  first = run()
  assert first.returncode == 0, first.stderr[-3000:]
  data = tmp_path / "data"
  assert first.stdout.splitlines() == [
      f"MATH train: {data}/math/train.jsonl, 7500 rows (from EleutherAI/hendrycks_math@"
      f"{commits['MATH train']})",
      f"MATH500: {data}/eval/math500.jsonl, 500 rows (from HuggingFaceH4/MATH-500@{commits['MATH500']})",
      f"AIME24: {data}/eval/aime24.jsonl, 30 rows (from HuggingFaceH4/aime_2024@{commits['AIME24']})",
      f"AIME25: {data}/eval/aime25.jsonl, 30 rows (from math-ai/aime25@{commits['AIME25']})",
      f"AMC23: {data}/eval/amc23.jsonl, 40 rows (from math-ai/amc23@{commits['AMC23']})",
      f"Minerva: {data}/eval/minerva.jsonl, 271 rows (from math-ai/minervamath@{commits['Minerva']})",
      "  1 row(s) the reward cannot read, left out:",
      "    test.jsonl line 6: answer '\\\\text{}': unparseable"]
  assert sorted(p.name for p in (data / "eval").iterdir()) == [
      "aime24.jsonl", "aime25.jsonl", "amc23.jsonl", "math500.jsonl", "minerva.jsonl"]
  second = run()
  assert second.returncode == 0 and second.stdout.count("(verified, skipped)") == 6, second.stdout
  (data / "eval" / "aime24.jsonl").write_text("{}\n")  # damaged: written again, the same
  before = prepare.read_manifest(data)
  third = run()
  assert third.returncode == 0 and third.stdout.count("(verified, skipped)") == 5
  assert "AIME24" in third.stderr and prepare.read_manifest(data) == before
