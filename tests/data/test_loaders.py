"""MATH-format loaders on good and malformed files."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graft_jax.data import DataError, load_problems, stable_id, write_jsonl


def _jsonl(path, rows):
  path.write_text("".join(
      (r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
  return path


GOOD = [
    {"problem": "What is 1+1?", "answer": "2", "subject": "Algebra",
     "level": "Level 2", "unique_id": "test/a/1.json"},
    {"question": "Half of 1?", "answer": "\\frac{1}{2}"},
    {"Problem": "AIME-style, capitalized keys", "Answer": 204},
    {"problem": "Solution only", "solution": "So $x=\\boxed{\\frac{\\pi}{2}}$."},
    {"question": "Float answer", "answer": 2.5},
]


def _check_good(problems, stats, source):
  assert [p.answer for p in problems] == ["2", "\\frac{1}{2}", "204",
                                          "\\frac{\\pi}{2}", "2.5"]
  assert problems[0].family == "Algebra" and problems[0].difficulty == 2
  assert problems[3].solution.endswith("$.")
  assert all(p.source == source for p in problems)
  assert problems[1].id == stable_id(source, "Half of 1?")
  assert stats.rows == stats.loaded == 5 and stats.num_skipped == 0


def test_jsonl(tmp_path):
  problems, stats = load_problems(_jsonl(tmp_path / "math500.jsonl", GOOD))
  _check_good(problems, stats, "math500")


def test_json_array_and_object_and_lines(tmp_path):
  (tmp_path / "a.json").write_text(json.dumps(GOOD, indent=2))
  _check_good(*load_problems(tmp_path / "a.json", source="S"), "S")
  (tmp_path / "b.json").write_text(json.dumps({"data": GOOD}))
  _check_good(*load_problems(tmp_path / "b.json", source="S"), "S")
  _jsonl(tmp_path / "c.json", GOOD)  # datasets' to_json writes JSON lines
  _check_good(*load_problems(tmp_path / "c.json", source="S"), "S")


def test_parquet(tmp_path):
  rows = [{"problem": r.get("problem") or r.get("question") or r.get("Problem"),
           "solution": r.get("solution"),
           "answer": None if "solution" in r else str(
               r.get("answer", r.get("Answer")))} for r in GOOD]
  pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
  problems, stats = load_problems(tmp_path / "x.parquet")
  # A null answer falls back to the boxed answer of the solution.
  assert [p.answer for p in problems][3] == "\\frac{\\pi}{2}"
  assert stats.loaded == 5


@pytest.mark.parametrize("bad_row, field, needle", [
    ({"answer": "1"}, "problem", "missing"),
    ({"problem": "", "answer": "1"}, "problem", "non-empty"),
    ({"problem": "p"}, "answer", "missing"),
    ({"problem": "p", "answer": "  "}, "answer", "empty answer"),
    ({"problem": "p", "answer": True}, "answer", "string or number"),
    ({"problem": "p", "solution": "no box"}, "solution", "boxed"),
    ('{"problem": "p", "answer": ', "<json>", "invalid JSON"),
    ('[1, 2]', "<row>", "expected an object"),
])
def test_malformed_row_names_file_line_and_field(tmp_path, bad_row, field, needle):
  path = _jsonl(tmp_path / "bad.jsonl", GOOD[:2] + [bad_row] + GOOD[2:])
  with pytest.raises(DataError) as err:
    load_problems(path)
  msg = str(err.value)
  assert str(path) in msg and "line 3" in msg and f"field '{field}'" in msg
  assert needle in msg


def test_json_array_errors_name_the_line(tmp_path):
  rows = GOOD[:3] + [{"problem": "no answer"}]
  path = tmp_path / "arr.json"
  path.write_text(json.dumps(rows, indent=1))
  line = path.read_text().splitlines().index(" {", 0)  # sanity: one per row
  assert line >= 0
  with pytest.raises(DataError, match=r"arr\.json: line (\d+): field 'answer'") as e:
    load_problems(path)
  reported = int(str(e.value).split("line ")[1].split(":")[0])
  assert path.read_text().splitlines()[reported - 1].strip() == "{"
  assert "no answer" in path.read_text().splitlines()[reported]


def test_skip_malformed_counts_by_field(tmp_path):
  rows = GOOD + [{"answer": "1"}, {"problem": "p"}, {"answer": "2"}, "{oops"]
  problems, stats = load_problems(_jsonl(tmp_path / "m.jsonl", rows),
                                  skip_malformed=True)
  assert len(problems) == 5 and stats.rows == 9
  assert stats.skipped == {"problem": 2, "answer": 1, "<json>": 1}
  assert stats.num_skipped == 4 and "line 6" in stats.examples[0]


def test_duplicates_get_distinct_stable_ids(tmp_path):
  rows = [{"problem": "same", "answer": "1"}] * 3
  problems, stats = load_problems(_jsonl(tmp_path / "d.jsonl", rows), source="D")
  base = stable_id("D", "same")
  assert [p.id for p in problems] == [base, f"{base}-2", f"{base}-3"]
  assert stats.duplicates == 2


def test_limit_and_round_trip(tmp_path):
  problems, _ = load_problems(_jsonl(tmp_path / "r.jsonl", GOOD), source="R")
  write_jsonl(problems, tmp_path / "out" / "r2.jsonl")
  again, _ = load_problems(tmp_path / "out" / "r2.jsonl", source="R")
  assert again == problems
  assert len(load_problems(tmp_path / "r.jsonl", limit=2)[0]) == 2


def test_missing_and_unknown_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.jsonl"):
    load_problems(tmp_path / "nope.jsonl")
  (tmp_path / "x.csv").write_text("a,b\n")
  with pytest.raises(DataError, match="x.csv.*unknown suffix"):
    load_problems(tmp_path / "x.csv")
