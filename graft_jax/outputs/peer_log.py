"""Per-step rollout logs of each model: Parquet files with a checksum manifest.

Layout: `<log_dir>/<model>/step_00000012.parquet` (one row per response, opens
with `pd.read_parquet(path)`) and `step_00000012.json`, its manifest (sha256,
size, rows, tokenizer identity). A step exists once its manifest does.

Besides the rollout itself, each row records what the peer did with it under
GRAFT: `offered` (its group was grafted into the peer's update), `s` (the
peer's compatibility score exp(lbar_peer - lbar_gen), see
`graft_jax.core.compat_weights`), `admitted` (it entered the peer's loss) and
`weight` (its loss weight there, 0 when not admitted). A response that was not
offered has `s` and `weight` NaN. With more than two models a response can be
offered to several receivers: those four columns hold the first receiver's (in
model order), and `receivers` holds every receiver's, a list of
`{receiver, s, admitted, weight}` per response (empty when not offered).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graft_jax.atomic_file import write_atomically

FORMAT_VERSION = 1
_MANIFEST_RE = re.compile(r'^step_(\d{8})\.json$')
_META_KEY = b'graft_jax.peer_log'
_COLUMNS = ('step', 'model', 'tokenizer', 'vocab_hash', 'prompt_id',
            'sample_index', 'prompt', 'response', 'response_ids', 'logprobs',
            'reward', 'advantage', 'finished', 'truncated', 'offered', 's',
            'admitted', 'weight', 'receivers')
_RECEIVER = pa.struct([('receiver', pa.string()), ('s', pa.float32()),
                       ('admitted', pa.bool_()), ('weight', pa.float32())])


class PeerLogError(ValueError):
  """A log file that is missing, truncated or corrupted; names the file."""


def tokenizer_label(tokenizer) -> str:
  """A name a person can read: ``'models/Qwen3-1.7B-Base (Qwen2TokenizerFast, 151669 tokens)'``."""
  name = getattr(tokenizer, 'name_or_path', '') or 'tokenizer'
  return f'{name} ({type(tokenizer).__name__}, {len(tokenizer)} tokens)'


def vocab_hash(vocab: Mapping[str, int]) -> str:
  """Short stable hash of a token -> id map (e.g. `tokenizer.get_vocab()`)."""
  blob = json.dumps(sorted(vocab.items()), ensure_ascii=False).encode()
  return hashlib.sha256(blob).hexdigest()[:16]


def unpad(values_BxL: np.ndarray, mask_BxL: np.ndarray) -> list[np.ndarray]:
  """Padded rows -> ragged rows keeping the masked-in entries."""
  return [v[m.astype(bool)] for v, m in zip(values_BxL, mask_BxL)]


def _paths(model_dir: pathlib.Path, step: int) -> tuple[pathlib.Path, ...]:
  stem = f'step_{step:08d}'
  return model_dir / f'{stem}.parquet', model_dir / f'{stem}.json'


def _ragged_array(rows: Sequence[Any], dtype: pa.DataType) -> pa.Array:
  np_dtype = dtype.to_pandas_dtype()
  parts = [np.asarray(r, dtype=np_dtype).ravel() for r in rows]
  offsets = np.zeros(len(parts) + 1, dtype=np.int32)
  np.cumsum([len(p) for p in parts], out=offsets[1:])
  flat = np.concatenate(parts) if parts else np.zeros(0, np_dtype)
  return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, dtype))


class PeerLogWriter:
  """Writes one model's per-step rollout logs; `cursor` is the last step."""

  def __init__(self, log_dir: str | os.PathLike, model_name: str, *,
               tokenizer_name: str, vocab_hash: str):
    self.model_name = model_name
    self.tokenizer_name = tokenizer_name
    self.vocab_hash = vocab_hash
    self.dir = pathlib.Path(log_dir) / model_name
    self.dir.mkdir(parents=True, exist_ok=True)
    for leftover in self.dir.glob('.step_*.tmp-*'):  # from a crash mid-write
      leftover.unlink(missing_ok=True)
    steps = _list_steps(self.dir)
    self.cursor: int | None = steps[-1] if steps else None

  def write(self, step: int, *, prompt_ids: Sequence[Any],
            responses: Sequence[str], response_ids: Sequence[Any],
            logprobs: Sequence[Any], rewards: Sequence[float],
            advantages: Sequence[float], finished: Sequence[bool],
            truncated: Sequence[bool], prompts: Sequence[str] | None = None,
            sample_index: Sequence[int] | None = None,
            gate: Mapping[str, Sequence[Any]] | None = None,
            extra: Mapping[str, Sequence[Any]] | None = None) -> pathlib.Path:
    """Writes step `step` atomically (parquet, then its manifest).

    Args:
      step: training step; rewriting an existing step replaces it.
      prompt_ids: per response; stored as strings so ids of any type match.
      responses: decoded response text per response.
      response_ids: ragged token ids per response (lists or 1-D arrays).
      logprobs: ragged generation log-probs, one per response token.
      rewards, advantages, finished, truncated: one per response.
      prompts: optional prompt text per response.
      sample_index: index within the prompt's group; default 0..k-1 per id
        in order of appearance.
      gate: what the peer did with each response (GRAFT): ``offered``,
        ``s``, ``admitted``, ``weight``, one per response, and optionally
        ``receivers``, a list of records per response (see the module
        docstring); default: nothing offered.
      extra: further per-response scalar columns (e.g. 'grafted').

    Returns:
      The parquet file's path.
    """
    num = len(prompt_ids)
    clash = sorted(set(extra or {}) & set(_COLUMNS))
    if clash:
      raise ValueError(f'peer log extra column {clash[0]!r} is reserved')
    cols: dict[str, Any] = dict(
        responses=responses, response_ids=response_ids, logprobs=logprobs,
        rewards=rewards, advantages=advantages, finished=finished,
        truncated=truncated, prompts=prompts, sample_index=sample_index)
    gate = dict(gate or {})
    unknown = sorted(set(gate) - {'offered', 's', 'admitted', 'weight', 'receivers'})
    if unknown:
      raise ValueError(f'peer log gate column {unknown[0]!r} is not one of offered, s, '
                       f'admitted, weight, receivers')
    cols.update({f'gate[{k}]': v for k, v in gate.items()})
    cols.update({f'extra[{k}]': v for k, v in (extra or {}).items()})
    for name, col in cols.items():
      if col is not None and len(col) != num:
        raise ValueError(f'peer log column {name} has {len(col)} rows, '
                         f'prompt_ids has {num}')
    for i, (ids, lps) in enumerate(zip(response_ids, logprobs)):
      if len(ids) != len(lps):
        raise ValueError(f'peer log row {i}: {len(ids)} response_ids but '
                         f'{len(lps)} logprobs')
    pids = [str(p) for p in prompt_ids]
    if sample_index is None:
      counts: dict[str, int] = {}
      sample_index = []
      for p in pids:
        sample_index.append(counts.get(p, 0))
        counts[p] = sample_index[-1] + 1
    table = pa.table({
        'step': pa.array(np.full(num, step, np.int64)),
        'model': pa.array([self.model_name] * num, pa.string()),
        'tokenizer': pa.array([self.tokenizer_name] * num, pa.string()),
        'vocab_hash': pa.array([self.vocab_hash] * num, pa.string()),
        'prompt_id': pa.array(pids, pa.string()),
        'sample_index': pa.array(np.asarray(sample_index, np.int32)),
        'prompt': pa.array(list(prompts) if prompts is not None
                           else [None] * num, pa.string()),
        'response': pa.array(list(responses), pa.string()),
        'response_ids': _ragged_array(response_ids, pa.int32()),
        'logprobs': _ragged_array(logprobs, pa.float32()),
        'reward': pa.array(np.asarray(rewards, np.float32)),
        'advantage': pa.array(np.asarray(advantages, np.float32)),
        'finished': pa.array(np.asarray(finished, bool)),
        'truncated': pa.array(np.asarray(truncated, bool)),
        'offered': pa.array(np.asarray(gate.get('offered', np.zeros(num)), bool)),
        's': pa.array(np.asarray(gate.get('s', np.full(num, np.nan)), np.float32)),
        'admitted': pa.array(np.asarray(gate.get('admitted', np.zeros(num)), bool)),
        'weight': pa.array(np.asarray(gate.get('weight', np.full(num, np.nan)), np.float32)),
        'receivers': pa.array([list(r) for r in gate.get('receivers', [[]] * num)],
                              pa.list_(_RECEIVER)),
        **{k: pa.array(list(v)) for k, v in (extra or {}).items()},
    })
    info = dict(version=FORMAT_VERSION, model=self.model_name, step=step,
                tokenizer=self.tokenizer_name, vocab_hash=self.vocab_hash)
    table = table.replace_schema_metadata({_META_KEY: json.dumps(info)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue().to_pybytes()

    parquet_path, manifest_path = _paths(self.dir, step)
    # Drop the old manifest first so a crash mid-rewrite reads as "no
    # manifest" rather than as a corrupted file.
    manifest_path.unlink(missing_ok=True)
    write_atomically(parquet_path, data)
    manifest = dict(info, file=parquet_path.name, bytes=len(data),
                    sha256=hashlib.sha256(data).hexdigest(), rows=num)
    write_atomically(manifest_path, json.dumps(manifest, indent=1).encode())
    self.cursor = step if self.cursor is None else max(self.cursor, step)
    return parquet_path

  def discard_after(self, step: int | None) -> None:
    """Deletes steps > `step` (all if None), e.g. when resuming a checkpoint.

    Logs written after the checkpoint belong to an abandoned future; removing
    them keeps replay readers from seeing steps that will be rewritten.
    """
    for s in _list_steps(self.dir):
      if step is None or s > step:
        parquet_path, manifest_path = _paths(self.dir, s)
        manifest_path.unlink(missing_ok=True)
        parquet_path.unlink(missing_ok=True)
    steps = _list_steps(self.dir)
    self.cursor = steps[-1] if steps else None


def _list_steps(model_dir: pathlib.Path) -> list[int]:
  if not model_dir.is_dir():
    return []
  return sorted(int(m.group(1)) for m in
                map(_MANIFEST_RE.match, os.listdir(model_dir)) if m)


class PeerLogReader:
  """Reads one model's logs, verifying every file against its manifest."""

  def __init__(self, log_dir: str | os.PathLike, model_name: str,
               cache_steps: int = 4):
    self.model_name = model_name
    self.dir = pathlib.Path(log_dir) / model_name
    if not self.dir.is_dir():
      raise PeerLogError(f'no peer logs for model {model_name!r} in '
                         f'{log_dir} ({self.dir} is not a folder)')
    self._cache: dict[int, pa.Table] = {}
    self._cache_steps = cache_steps
    self._index: dict[str, list[int]] | None = None

  def steps(self) -> list[int]:
    """Steps with a manifest (a parquet file without one is not a step)."""
    return _list_steps(self.dir)

  @property
  def cursor(self) -> int | None:
    steps = self.steps()
    return steps[-1] if steps else None

  def manifest(self, step: int) -> dict[str, Any]:
    parquet_path, manifest_path = _paths(self.dir, step)
    if not manifest_path.exists():
      raise PeerLogError(f'{parquet_path}: no manifest ({manifest_path.name} '
                         f'missing; the write did not complete)')
    try:
      return json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise PeerLogError(f'{manifest_path}: unreadable manifest ({e})') from e

  def load_step(self, step: int) -> pa.Table:
    """The verified table of one step (`.to_pandas()`, `.to_pylist()`)."""
    if step in self._cache:
      return self._cache[step]
    table = self._read_verified(step)
    if len(self._cache) >= self._cache_steps:
      self._cache.pop(next(iter(self._cache)))
    self._cache[step] = table
    return table

  def _read_verified(self, step: int) -> pa.Table:
    manifest = self.manifest(step)
    parquet_path, _ = _paths(self.dir, step)
    if not parquet_path.exists():
      raise PeerLogError(f'{parquet_path}: missing (its manifest exists)')
    data = parquet_path.read_bytes()
    if len(data) != manifest['bytes']:
      raise PeerLogError(f'{parquet_path}: truncated or overwritten '
                         f'({len(data)} bytes, manifest says '
                         f'{manifest["bytes"]})')
    if hashlib.sha256(data).hexdigest() != manifest['sha256']:
      raise PeerLogError(f'{parquet_path}: checksum mismatch (sha256 differs '
                         f'from its manifest; the file is corrupted)')
    table = pq.read_table(pa.BufferReader(data))
    if table.num_rows != manifest['rows']:
      raise PeerLogError(f'{parquet_path}: {table.num_rows} rows, manifest '
                         f'says {manifest["rows"]}')
    return table

  def prompt_index(self) -> dict[str, list[int]]:
    """prompt id -> steps that logged it (ascending); built once."""
    if self._index is None:
      index: dict[str, list[int]] = {}
      for step in self.steps():
        ids = self._read_verified(step).column('prompt_id').to_pylist()
        for pid in dict.fromkeys(ids):
          index.setdefault(pid, []).append(step)
      self._index = index
    return self._index

  def lookup(self, prompt_id: Any, step: int | None = None) -> pa.Table:
    """The logged group(s) of `prompt_id`, matched as a string.

    Args:
      prompt_id: the id as written (ints match their string form).
      step: restrict to one step; None returns every logged occurrence (one
        per epoch), ordered by step then sample_index.

    Returns:
      A table with the log's columns; zero rows if the id was never logged.
    """
    pid = str(prompt_id)
    steps = [step] if step is not None else self.prompt_index().get(pid, [])
    parts = []
    for s in steps:
      t = self.load_step(s)
      parts.append(t.filter(pc.equal(t.column('prompt_id'), pid)))
    if not parts:
      return self._empty_table()
    # A log begun before the `receivers` column existed reads it as null there.
    return pa.concat_tables(parts, promote_options='default').sort_by(
        [('step', 'ascending'), ('sample_index', 'ascending')])

  def _empty_table(self) -> pa.Table:
    steps = self.steps()
    if steps:
      return self.load_step(steps[0]).schema.empty_table()
    return pa.table({'prompt_id': pa.array([], pa.string())})
