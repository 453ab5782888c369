"""Metrics writer: jsonl lines, TensorBoard events, flattening, null for NaN."""

import json
import struct

import jax.numpy as jnp
import numpy as np
from tensorboardX.proto import event_pb2

from graft_jax.outputs import metrics_writer as metrics_lib


def test_flatten():
  assert metrics_lib.flatten(
      {'a': {'reward_mean': 0.5, 'len': {'mean': 3}}, 'lr': 1e-6}) == {
          'a/reward_mean': 0.5, 'a/len/mean': 3, 'lr': 1e-6}


def test_jsonl_tensorboard_and_nulls(tmp_path):
  with metrics_lib.MetricsWriter(tmp_path, total_steps=3) as w:
    w.write(1, {'a': {'reward_mean': jnp.float32(0.25)},
                'b': {'reward_mean': np.float64(0.5)},
                'graft': {'grafted_groups': jnp.int32(4),
                          'admission_rate': float('nan')},
                'loss': jnp.bfloat16(1.5), 'hist': np.array([1.0, np.inf]),
                'note': 'warm'})
    # Appended and flushed per step: readable before close.
    lines = (tmp_path / 'metrics.jsonl').read_text().splitlines()
    assert len(lines) == 1
    w.write(2, {'a': {'reward_mean': 0.75}})
  text = (tmp_path / 'metrics.jsonl').read_text()
  assert 'NaN' not in text and 'Infinity' not in text
  first, second = [json.loads(line) for line in text.splitlines()]
  assert first['step'] == 1 and isinstance(first['time'], float)
  assert first['a/reward_mean'] == 0.25 and first['b/reward_mean'] == 0.5
  assert first['graft/grafted_groups'] == 4
  assert first['graft/admission_rate'] is None
  assert first['loss'] == 1.5 and first['hist'] == [1.0, None]
  assert first['note'] == 'warm'
  assert second == {'step': 2, 'time': second['time'], 'a/reward_mean': 0.75}
  events = list((tmp_path / 'tensorboard').glob('events.out.tfevents.*'))
  assert len(events) == 1 and events[0].stat().st_size > 0


def test_tensorboard_scalars_are_readable(tmp_path):
  with metrics_lib.MetricsWriter(tmp_path, progress_bar=False) as w:
    w.write(3, {'a': {'reward_mean': 0.5}, 'bad': float('inf')})
  data = next((tmp_path / 'tensorboard').glob('events*')).read_bytes()
  tags = {}
  # TFRecord framing: u64 length, u32 crc, payload, u32 crc.
  while data:
    (n,) = struct.unpack('<Q', data[:8])
    event = event_pb2.Event.FromString(data[12:12 + n])
    data = data[12 + n + 4:]
    for v in event.summary.value:
      tags[v.tag] = (event.step, v.simple_value)
  assert tags == {'a/reward_mean': (3, 0.5)}


def test_append_on_resume_and_read_jsonl(tmp_path):
  with metrics_lib.MetricsWriter(tmp_path, tensorboard=False,
                                 progress_bar=False) as w:
    for step in (0, 1, 2, 3):
      w.write(step, {'x': step})
  # Resumed from a checkpoint after steps 0 and 1; it stops again after step 2.
  # Step 3 of the first attempt is stale and must not survive.
  with metrics_lib.MetricsWriter(tmp_path, tensorboard=False,
                                 progress_bar=False, initial_step=2) as w:
    w.write(2, {'x': 20})
  records = metrics_lib.read_jsonl(tmp_path / 'metrics.jsonl')
  assert [(r['step'], r['x']) for r in records] == [(0, 0), (1, 1), (2, 20)]
  # A fresh run (initial step 0) in the same workdir starts a new file.
  with metrics_lib.MetricsWriter(tmp_path, tensorboard=False, progress_bar=False) as w:
    w.write(0, {'x': -1})
  lines = (tmp_path / 'metrics.jsonl').read_text().splitlines()
  assert len(lines) == 1 and metrics_lib.read_jsonl(tmp_path / 'metrics.jsonl')[0]['x'] == -1


def test_disabled_writes_nothing(tmp_path):
  w = metrics_lib.MetricsWriter(tmp_path / 'w', enabled=False)
  assert w.write(1, {'a': {'x': 1.0}})['a/x'] == 1.0
  w.close()
  assert not (tmp_path / 'w').exists()
