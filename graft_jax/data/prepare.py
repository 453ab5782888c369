"""The paper's training set and five benchmarks as MATH-format jsonl, from Hub dataset repos.

Each `Source` names a Hub dataset repo, its revision, the files of its split and
their columns; `prepare` downloads them through huggingface_hub's cache, turns each
row into ``{"id", "problem", "answer"}`` with the answer in the form the reward
reads, and checks the result before anything is written: the source's row count
(a 5,000-row MATH test set would load as well as MATH500), every row converted or
named, and, once known, the file's content hash. The files are written whole or
not at all; ``prepared.json`` beside them records each one's commit, rows and
sha256, so a rerun verifies and skips, and reads the same commits again.
docs/evaluation.md says why each source was chosen.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import pathlib

from graft_jax.atomic_file import file_sha256, write_atomically
from graft_jax.data.rows import DataError, read_rows
from graft_jax.rewards import extract

log = logging.getLogger(__name__)
MANIFEST = "prepared.json"


class PrepareError(ValueError):
  """A source that cannot be prepared as it should; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Source:
  """One output file and where it comes from.

  ``files``: patterns of the split's files in the repo (the first that matches is
  read). ``answer``: the answer columns; a row without one takes the last
  ``\\boxed{}`` of ``solution``. ``sha256``: the output's hash, None until a run
  has verified it (``prepared.json`` then holds it; copy it here to pin it).
  """
  name: str
  out: str  # relative to the data root
  repo: str
  revision: str
  files: tuple[str, ...]
  rows: int
  problem: tuple[str, ...] = ("problem",)
  answer: tuple[str, ...] = ("answer",)
  id: str = ""
  keep: tuple[str, ...] = ()  # columns carried over (subject, level)
  sha256: str | None = None


# Revisions are branches until a run with network access resolves them: the commit
# and hash it records in prepared.json pin every later run (see docs/evaluation.md).
SOURCES = (
    Source("MATH train", "math/train.jsonl", "EleutherAI/hendrycks_math", "main",
           ("*/train-*.parquet",), 7500, answer=(), keep=("type", "level")),
    Source("MATH500", "eval/math500.jsonl", "HuggingFaceH4/MATH-500", "main", ("test.jsonl",),
           500, id="unique_id", keep=("subject", "level")),
    Source("AIME24", "eval/aime24.jsonl", "HuggingFaceH4/aime_2024", "main",
           ("data/train-*.parquet",), 30, id="id"),
    Source("AIME25", "eval/aime25.jsonl", "math-ai/aime25", "main", ("test.jsonl",), 30, id="id"),
    Source("AMC23", "eval/amc23.jsonl", "math-ai/amc23", "main", ("test.jsonl",), 40,
           problem=("question",), id="id"),
    Source("Minerva", "eval/minerva.jsonl", "math-ai/minervamath", "main", ("test.jsonl",), 272,
           problem=("question",)),
)


@dataclasses.dataclass
class Prepared:
  """What `prepare` did for one source."""
  name: str
  path: pathlib.Path
  commit: str | None
  rows: int
  dropped: dict[str, str]  # row id -> why it could not be converted
  skipped: bool = False  # already there and verified


def prepare(source: Source, root: str | pathlib.Path, *, check_answers=None) -> Prepared:
  """Writes ``<root>/<source.out>`` from the source, or verifies the one there.

  ``check_answers``: golds -> per gold None or why the reward cannot read it
  (default `graft_jax.rewards.score.check_golds`, math-verify as scoring runs it).

  Raises:
    PrepareError: one line: the source unreachable, its files or columns not as
      expected, a row count or content hash that differs; nothing is written then.
  """
  root = pathlib.Path(root)
  path = root / source.out
  recorded = read_manifest(root).get(source.name)
  want = source.sha256 or (recorded or {}).get("sha256")  # a pin in the code comes first
  if recorded and path.is_file() and file_sha256(path) == want == recorded["sha256"]:
    return Prepared(source.name, path, recorded["commit"], recorded["rows"],
                    recorded["dropped"], skipped=True)
  if recorded and path.is_file():
    log.warning("%s: %s differs from the one prepared.json records; writing it again",
                source.name, path)
  from graft_jax.models import hub  # deferred: huggingface_hub only when downloading
  revision = (recorded or {}).get("commit") or source.revision
  try:
    got = hub.resolve(source.repo, revision, repo_type="dataset",
                      allow_patterns=source.files)
  except hub.HubError as e:
    raise PrepareError(f"{source.name}: {e}") from None
  rows = _read_split(source, pathlib.Path(got.folder))
  if len(rows) != source.rows:
    raise PrepareError(f"{source.name}: {source.repo}@{got.commit} has {len(rows)} rows, "
                       f"expected {source.rows}: not the split the paper evaluates; "
                       f"nothing written")
  out, dropped = convert(source, rows, check_answers=check_answers)
  data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out)
  digest = hashlib.sha256(data.encode("utf-8")).hexdigest()
  if source.sha256 and digest != source.sha256:
    raise PrepareError(f"{source.name}: content sha256 {digest} differs from the pinned "
                       f"{source.sha256}; nothing written")
  path.parent.mkdir(parents=True, exist_ok=True)
  write_atomically(path, data)
  record = {"repo": source.repo, "commit": got.commit, "rows": len(out), "dropped": dropped,
            "sha256": digest}
  write_manifest(root, {**read_manifest(root), source.name: record})
  return Prepared(source.name, path, got.commit, len(out), dropped)


def _read_split(source: Source, folder: pathlib.Path) -> list[dict]:
  """The rows of the first of ``source.files`` that matches, files in name order."""
  for pattern in source.files:
    files = sorted(folder.glob(pattern))
    if files:
      break
  else:
    raise PrepareError(f"{source.name}: no file matching {' or '.join(source.files)} in "
                       f"{source.repo}")
  rows = []
  for file in files:
    for where, row in read_rows(file):
      if isinstance(row, DataError):
        raise PrepareError(f"{source.name}: {row}")
      rows.append(dict(row, _where=f"{file.relative_to(folder)} {where}"))
  return rows


def convert(source: Source, rows: list[dict], *, check_answers=None
            ) -> tuple[list[dict], dict[str, str]]:
  """The MATH-format rows, and ``{row id: why}`` of those that cannot be: each row's problem,
  its answer bare (no ``$``, no ``\\boxed{}``; integral numbers without ``.0``), which the
  reward wraps in ``\\boxed{}`` and math-verify must read back."""
  columns = {c for r in rows for c in r}
  for cols, what in ((source.problem, "problem"), (source.answer or ("solution",), "answer")):
    if not columns & set(cols):
      raise PrepareError(f"{source.name}: no {' or '.join(cols)} column ({what}) in "
                         f"{source.repo}; it has {', '.join(sorted(columns - {'_where'}))}")
  out, dropped = [], {}
  for row in rows:
    # The source's id, else where the row stands ("test.jsonl line 7").
    rid = str(row[source.id] if row.get(source.id) is not None else row["_where"])
    problem = _first(row, source.problem)
    answer, why = _answer(row, source.answer)
    if not isinstance(problem, str) or not problem.strip():
      why = "no problem text"
    if why:
      dropped[rid] = why
      continue
    out.append({"id": rid, "problem": problem.strip(), "answer": answer,
                **{k: row[k] for k in source.keep if row.get(k) is not None}})
  if check_answers is None:
    from graft_jax.rewards.score import check_golds as check_answers
  for r, why in zip(list(out), check_answers([r["answer"] for r in out])):
    if why:
      dropped[r["id"]] = f"answer {r['answer']!r}: {why}"
      out.remove(r)
  return out, dropped


def _first(row: dict, cols):
  return next((row[c] for c in cols if row.get(c) is not None), None)


def _answer(row: dict, cols) -> tuple[str | None, str | None]:
  """(the answer bare, None) or (None, why not)."""
  value = _first(row, cols) if cols else None
  if value is None:
    solution = row.get("solution")
    value = extract.last_boxed(solution) if isinstance(solution, str) else None
    if value is None:
      return None, "no answer, and no \\boxed{} in its solution"
  if isinstance(value, bool):
    return None, f"answer {value!r} is not a number or text"
  if isinstance(value, float):
    if not math.isfinite(value):
      return None, f"answer {value!r} is not finite"
    value = str(int(value)) if value.is_integer() else repr(value)
  text = extract.gold_content(str(value))
  if not text:
    return None, "empty answer"
  if extract.last_boxed("\\boxed{" + text + "}") != text:
    return None, f"answer {text!r} has unbalanced braces"
  return text, None


def read_manifest(root: str | pathlib.Path) -> dict:
  path = pathlib.Path(root, MANIFEST)
  return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_manifest(root: str | pathlib.Path, manifest: dict) -> None:
  write_atomically(pathlib.Path(root, MANIFEST), json.dumps(manifest, indent=1) + "\n")
