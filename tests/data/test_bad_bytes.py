"""Bytes that are not UTF-8 name their file, line and field, and skip like any bad row."""

import json

import pytest

from graft_jax.data import DataError, load_problems

GOOD = b'{"problem": "What is 1+1?", "answer": "2"}\n'
LATIN1 = '{"problem": "Caf\u00e9 au lait: 2+2?", "answer": "4"}\n'.encode("latin-1")


def test_a_latin1_row_in_jsonl_names_file_line_and_field(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_bytes(GOOD + LATIN1 + GOOD.replace(b"1+1", b"3+3"))
  with pytest.raises(DataError) as err:
    load_problems(path)
  msg = str(err.value)
  assert msg.startswith(f"{path}: line 2: field 'problem': not valid UTF-8: byte 0xe9")
  assert "after 'Caf'" in msg and "re-encode the file as UTF-8" in msg
  problems, stats = load_problems(path, skip_malformed=True)
  assert [p.problem for p in problems] == ["What is 1+1?", "What is 3+3?"]
  assert stats.skipped == {"<encoding>": 1} and stats.rows == 3
  assert "line 2" in stats.examples[0]


def test_a_json_array_names_the_line_of_the_row_and_the_field(tmp_path):
  path = tmp_path / "train.json"
  path.write_bytes(b'[\n {"problem": "ok", "answer": "1"},\n {"problem": "x",\n  "answer": "\xff7"}\n]')
  with pytest.raises(DataError, match=rf"{path}: line 3: field 'answer': not valid UTF-8: byte 0xff"):
    load_problems(path)


def test_a_bad_byte_outside_any_string_is_invalid_json_and_says_so(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_bytes(GOOD + b'{"problem": "p", "answer": 1\xe9}\n')
  with pytest.raises(DataError, match=r"line 2: field '<json>': invalid JSON.*not UTF-8"):
    load_problems(path)


def test_an_escaped_lone_surrogate_is_refused_too(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_bytes(GOOD + b'{"problem": "half a pair \\ud83d", "answer": "1"}\n')
  with pytest.raises(DataError, match=r"line 2: field 'problem': not valid UTF-8: escape \\ud83d"):
    load_problems(path)


def test_line_separators_inside_strings_and_a_bom_are_fine(tmp_path):
  path = tmp_path / "train.jsonl"
  rows = [{"problem": "a\u2028b\u0085c", "answer": "1"}, {"problem": "d", "answer": "2"}]
  text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
  path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
  problems, stats = load_problems(path)
  assert [p.problem for p in problems] == ["a\u2028b\u0085c", "d"] and stats.rows == 2
