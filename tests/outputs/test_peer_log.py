"""Peer-log store: round trip, integrity checks, crash leftovers, lookup."""

import json
import pathlib

import numpy as np
import pyarrow.parquet as pq
import pytest

from graft_jax.outputs import peer_log

VOCAB_HASH = peer_log.vocab_hash({'a': 0, 'b': 1})


def _writer(tmp_path, name='qwen3'):
  return peer_log.PeerLogWriter(tmp_path, name, tokenizer_name='tok-q',
                                vocab_hash=VOCAB_HASH)


def _rows(prompt_ids, seed=0):
  """One response per prompt id, ragged lengths 1..4."""
  rng = np.random.default_rng(seed)
  lens = [1 + (i % 4) for i in range(len(prompt_ids))]
  return dict(
      prompt_ids=prompt_ids,
      prompts=[f'q{p}' for p in prompt_ids],
      responses=[f'r{i}' for i in range(len(prompt_ids))],
      response_ids=[rng.integers(0, 100, n).astype(np.int32) for n in lens],
      logprobs=[-rng.random(n) for n in lens],
      rewards=[float(i % 2) for i in range(len(prompt_ids))],
      advantages=[0.5 - (i % 2) for i in range(len(prompt_ids))],
      finished=[True] * len(prompt_ids),
      truncated=[False] * len(prompt_ids))


def test_round_trip(tmp_path):
  w = _writer(tmp_path)
  assert w.cursor is None
  rows = _rows([7, 7, 9, 9])
  path = w.write(3, **rows, extra={'grafted': [False, True, False, False]})
  assert w.cursor == 3
  reader = peer_log.PeerLogReader(tmp_path, 'qwen3')
  assert reader.steps() == [3] and reader.cursor == 3
  t = reader.load_step(3).to_pydict()
  assert t['prompt_id'] == ['7', '7', '9', '9']
  assert t['sample_index'] == [0, 1, 0, 1]
  assert t['step'] == [3] * 4 and t['model'] == ['qwen3'] * 4
  assert t['tokenizer'] == ['tok-q'] * 4
  assert t['vocab_hash'] == [VOCAB_HASH] * 4
  assert t['prompt'] == ['q7', 'q7', 'q9', 'q9']
  assert t['response'] == rows['responses']
  assert t['grafted'] == [False, True, False, False]
  for got, want in zip(t['response_ids'], rows['response_ids']):
    assert got == want.tolist()
  for got, want in zip(t['logprobs'], rows['logprobs']):
    np.testing.assert_allclose(got, want.astype(np.float32))
  assert t['reward'] == rows['rewards']
  assert t['advantage'] == rows['advantages']
  # A plain parquet reader (what pd.read_parquet uses) opens it directly.
  assert pq.read_table(path).num_rows == 4
  manifest = reader.manifest(3)
  assert manifest['rows'] == 4 and manifest['vocab_hash'] == VOCAB_HASH


def test_pandas_one_liner(tmp_path):
  import pandas as pd  # the test extra installs it: the README promises this one-liner
  path = _writer(tmp_path).write(0, **_rows([1, 2]))
  assert list(pd.read_parquet(path)['prompt_id']) == ['1', '2']


def test_truncated_file_is_refused(tmp_path):
  path = _writer(tmp_path).write(1, **_rows([1, 2, 3]))
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])
  reader = peer_log.PeerLogReader(tmp_path, 'qwen3')
  with pytest.raises(peer_log.PeerLogError,
                     match=r'step_00000001\.parquet: truncated'):
    reader.load_step(1)


def test_byte_flipped_file_is_refused(tmp_path):
  path = _writer(tmp_path).write(1, **_rows([1, 2, 3]))
  data = bytearray(path.read_bytes())
  data[len(data) // 2] ^= 0xFF
  path.write_bytes(bytes(data))
  with pytest.raises(peer_log.PeerLogError,
                     match=r'step_00000001\.parquet: checksum mismatch'):
    peer_log.PeerLogReader(tmp_path, 'qwen3').load_step(1)


def test_crash_leftovers_are_ignored(tmp_path):
  w = _writer(tmp_path)
  w.write(1, **_rows([1, 2]))
  # A crash mid-write of step 2 leaves only a tmp file; one between the
  # parquet and its manifest leaves a parquet file without a manifest.
  (w.dir / '.step_00000002.parquet.tmp-123-abcd').write_bytes(b'PAR1partial')
  good = w.dir / 'step_00000001.parquet'
  (w.dir / 'step_00000003.parquet').write_bytes(good.read_bytes())
  reader = peer_log.PeerLogReader(tmp_path, 'qwen3')
  assert reader.steps() == [1] and reader.cursor == 1
  with pytest.raises(peer_log.PeerLogError,
                     match=r'step_00000003\.parquet: no manifest'):
    reader.load_step(3)
  # Reopening the writer (a resumed run) clears the tmp leftover.
  assert _writer(tmp_path).cursor == 1
  assert not list(w.dir.glob('.*tmp*'))


def test_crash_during_rewrite_reads_as_no_manifest(tmp_path, monkeypatch):
  w = _writer(tmp_path)
  w.write(1, **_rows([1, 2]))
  real = peer_log.write_atomically

  def crash_on_manifest(path, data):
    if path.suffix == '.json':
      raise OSError('disk full')
    real(path, data)

  monkeypatch.setattr(peer_log, 'write_atomically', crash_on_manifest)
  with pytest.raises(OSError):
    w.write(1, **_rows([5, 6], seed=1))
  reader = peer_log.PeerLogReader(tmp_path, 'qwen3')
  assert reader.steps() == []
  with pytest.raises(peer_log.PeerLogError, match='no manifest'):
    reader.load_step(1)
  assert not list(w.dir.glob('.*tmp*'))


def test_lookup_by_prompt_id(tmp_path):
  w = _writer(tmp_path)
  w.write(1, **_rows([10, 10, 11, 11]))
  w.write(2, **_rows([12, 12, 10, 10], seed=1))
  reader = peer_log.PeerLogReader(tmp_path, 'qwen3')
  assert reader.prompt_index() == {'10': [1, 2], '11': [1], '12': [2]}
  both = reader.lookup(10)
  assert both.column('step').to_pylist() == [1, 1, 2, 2]
  assert both.column('sample_index').to_pylist() == [0, 1, 0, 1]
  assert both.column('response').to_pylist() == ['r0', 'r1', 'r2', 'r3']
  assert reader.lookup('10', step=2).column('step').to_pylist() == [2, 2]
  assert reader.lookup(99).num_rows == 0


def test_models_are_kept_apart_and_missing_model_is_named(tmp_path):
  _writer(tmp_path, 'qwen3').write(0, **_rows([1]))
  _writer(tmp_path, 'smollm3').write(0, **_rows([2]))
  assert peer_log.PeerLogReader(tmp_path, 'smollm3').lookup(2).num_rows == 1
  with pytest.raises(peer_log.PeerLogError, match="model 'llama'"):
    peer_log.PeerLogReader(tmp_path, 'llama')


def test_discard_after(tmp_path):
  w = _writer(tmp_path)
  for step in range(4):
    w.write(step, **_rows([step]))
  w.discard_after(1)
  assert w.cursor == 1
  assert peer_log.PeerLogReader(tmp_path, 'qwen3').steps() == [0, 1]
  w.discard_after(None)
  assert w.cursor is None


def test_bad_columns_are_refused(tmp_path):
  w = _writer(tmp_path)
  rows = _rows([1, 2])
  with pytest.raises(ValueError, match='column rewards has 1 rows'):
    w.write(0, **dict(rows, rewards=[1.0]))
  with pytest.raises(ValueError, match='row 1: 2 response_ids but 3 logprobs'):
    w.write(0, **dict(rows, response_ids=[[1], [2, 3]],
                      logprobs=[[-0.1], [-0.1, -0.2, -0.3]]))
  with pytest.raises(ValueError, match="extra column 'reward' is reserved"):
    w.write(0, **rows, extra={'reward': [0, 1]})


def test_unpad_and_vocab_hash():
  ids = np.array([[5, 6, 0], [7, 0, 0]])
  mask = np.array([[1, 1, 0], [1, 0, 0]])
  assert [r.tolist() for r in peer_log.unpad(ids, mask)] == [[5, 6], [7]]
  assert peer_log.vocab_hash({'b': 1, 'a': 0}) == VOCAB_HASH
  assert peer_log.vocab_hash({'a': 1, 'b': 0}) != VOCAB_HASH


def test_manifest_is_json(tmp_path):
  w = _writer(tmp_path)
  w.write(4, **_rows([1]))
  m = json.loads((w.dir / 'step_00000004.json').read_text())
  assert m['file'] == 'step_00000004.parquet' and len(m['sha256']) == 64


def test_gate_columns_default_to_not_offered_and_round_trip(tmp_path):
  w = _writer(tmp_path)
  rows = _rows([1, 1, 2, 2])
  w.write(0, **rows)
  w.write(1, **rows, gate=dict(offered=[False, False, True, True], s=[np.nan, np.nan, 0.5, 1.25],
                               admitted=[False, False, False, True],
                               weight=[np.nan, np.nan, 0.0, 1.0]))
  reader = peer_log.PeerLogReader(tmp_path, 'qwen3')
  t0 = reader.load_step(0).to_pandas()
  assert not t0['offered'].any() and not t0['admitted'].any()
  assert t0['s'].isna().all() and t0['weight'].isna().all()
  t1 = reader.load_step(1).to_pandas()
  assert t1['offered'].tolist() == [False, False, True, True]
  assert t1['s'].tolist()[2:] == [0.5, 1.25] and t1['s'].isna().tolist()[:2] == [True, True]
  assert t1['admitted'].tolist() == [False, False, False, True]
  assert t1['weight'].tolist()[2:] == [0.0, 1.0]
  with pytest.raises(ValueError, match="gate column 'score' is not one of"):
    w.write(2, **rows, gate={'score': [1.0] * 4})
  with pytest.raises(ValueError, match=r'column gate\[s\] has 3 rows'):
    w.write(2, **rows, gate={'s': [1.0] * 3})


def test_every_receiver_of_a_response_round_trips(tmp_path):
  w = _writer(tmp_path)
  rows = _rows([1, 1, 2])
  receivers = [[], [dict(receiver='b', s=0.5, admitted=False, weight=0.0)],
               [dict(receiver='b', s=1.25, admitted=True, weight=1.0),
                dict(receiver='c', s=0.75, admitted=False, weight=0.0)]]
  w.write(0, **rows)
  w.write(1, **rows, gate=dict(offered=[False, True, True], s=[np.nan, 0.5, 1.25],
                               admitted=[False, False, True], weight=[np.nan, 0.0, 1.0],
                               receivers=receivers))
  reader = peer_log.PeerLogReader(tmp_path, 'qwen3')
  assert reader.load_step(0).column('receivers').to_pylist() == [[], [], []]
  assert reader.load_step(1).column('receivers').to_pylist() == receivers
  with pytest.raises(ValueError, match=r'column gate\[receivers\] has 2 rows'):
    w.write(2, **rows, gate=dict(receivers=receivers[:2]))


def test_lookup_reads_a_step_logged_before_the_receivers_column(tmp_path):
  w = _writer(tmp_path)
  w.write(0, **_rows([7, 8]))
  w.write(1, **_rows([7, 9]))
  # Step 0 as an older writer left it: the same table without `receivers`.
  path = w.dir / 'step_00000000.parquet'
  old = pq.read_table(path).drop_columns(['receivers'])
  pq.write_table(old, path)
  manifest = json.loads((w.dir / 'step_00000000.json').read_text())
  data = path.read_bytes()
  manifest.update(bytes=len(data), sha256=__import__('hashlib').sha256(data).hexdigest())
  (w.dir / 'step_00000000.json').write_text(json.dumps(manifest))
  got = peer_log.PeerLogReader(tmp_path, 'qwen3').lookup(7)
  assert got.column('step').to_pylist() == [0, 1]
  assert got.column('receivers').to_pylist() == [None, []]


def test_tokenizer_label_is_readable(tmp_path):
  import sys
  sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / 'models'))
  import tiny_hf
  tok = tiny_hf.make_tokenizer(tmp_path / 'tok')
  from graft_jax.models import load_tokenizer
  loaded = load_tokenizer(str(tmp_path / 'tok'))
  label = peer_log.tokenizer_label(loaded)
  assert label.startswith(f'{tmp_path / "tok"} (') and label.endswith(f', {len(tok)} tokens)')
