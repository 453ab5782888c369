"""Checkpoints: round trip, keep-last-N, an interrupted save hides nothing."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graft_jax.outputs import checkpoint


def _state(scale=1.0):
  key = jax.random.key(7)
  return {
      'policy_a': {'w': jnp.arange(6, dtype=jnp.float32).reshape(2, 3) * scale,
                   'b': jnp.array([1.5, -2.25], jnp.bfloat16) * scale},
      'opt_a': {'count': jnp.array(3, jnp.int32), 'mu': jnp.zeros((2, 3))},
      'rng': {'typed': key, 'data': jax.random.key_data(key)},
  }


def _assert_tree_equal(got, want):
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert g.dtype == w.dtype and g.shape == w.shape
    if jnp.issubdtype(w.dtype, jax.dtypes.prng_key):
      g, w = jax.random.key_data(g), jax.random.key_data(w)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


META = {'step': 10, 'data_position': {'epoch': 1, 'index': 256},
        'capability': {'model_a': [0.5, 0.25]}, 'peer_log_cursor': 10}


def test_round_trip_and_empty(tmp_path):
  with checkpoint.Checkpointer(tmp_path, every_steps=5, keep=3) as ckpt:
    abstract = jax.eval_shape(_state)
    assert ckpt.restore_latest(abstract) is None
    assert ckpt.save(10, _state(), META)
    ckpt.wait()
    state, meta = ckpt.restore_latest(abstract)
  _assert_tree_equal(state, _state())
  assert meta == META
  # The restored key is usable and continues the same stream.
  np.testing.assert_array_equal(
      jax.random.uniform(state['rng']['typed']),
      jax.random.uniform(_state()['rng']['typed']))


def test_interval_force_and_keep_last_n(tmp_path):
  with checkpoint.Checkpointer(tmp_path, every_steps=2, keep=2) as ckpt:
    saved = [s for s in range(1, 8)
             if ckpt.save(s, _state(s), {'step': s})]
    assert saved == [2, 4, 6]
    assert ckpt.save(7, _state(7), {'step': 7}, force=True)
    ckpt.wait()
    assert ckpt.steps() == [6, 7]
    state, meta = ckpt.restore_latest(jax.eval_shape(_state))
  assert meta == {'step': 7}
  _assert_tree_equal(state, _state(7))


@pytest.mark.parametrize('kind', ['tmp_dir', 'no_commit_marker'])
def test_interrupted_save_leaves_previous_loadable(tmp_path, kind):
  with checkpoint.Checkpointer(tmp_path, every_steps=10, keep=2) as ckpt:
    ckpt.save(10, _state(1), {'step': 10})
    ckpt.save(20, _state(2), {'step': 20})
  # Simulate a crash while writing step 30 from a copy of a real step.
  if kind == 'tmp_dir':
    broken = tmp_path / '30.orbax-checkpoint-tmp-1700000000'
  else:
    broken = tmp_path / '30'
  shutil.copytree(tmp_path / '20', broken)
  (broken / checkpoint.COMMIT_MARKER).unlink()
  shutil.rmtree(broken / 'state')

  ckpt = checkpoint.Checkpointer(tmp_path, every_steps=10, keep=2)
  state, meta = ckpt.restore_latest(jax.eval_shape(_state))
  assert meta == {'step': 20}
  _assert_tree_equal(state, _state(2))
  # The run continues: step 30 saves again, and keep-last-2 drops 10, not 20.
  ckpt.save(30, _state(3), {'step': 30})
  ckpt.wait()
  assert ckpt.steps() == [20, 30]
  assert ckpt.restore_latest(jax.eval_shape(_state))[1] == {'step': 30}
  ckpt.close()
  if kind == 'no_commit_marker':
    assert list(tmp_path.glob('30.uncommitted-*'))


def test_wrong_structure_names_the_folder(tmp_path):
  with checkpoint.Checkpointer(tmp_path, every_steps=1, keep=1) as ckpt:
    ckpt.save(1, _state(), {})
    ckpt.wait()
    with pytest.raises(checkpoint.CheckpointError, match=r'checkpoint .*/1 '):
      ckpt.restore_latest({'other': jax.ShapeDtypeStruct((2,), jnp.float32)})


def test_metadata_must_be_json(tmp_path):
  with checkpoint.Checkpointer(tmp_path, every_steps=1, keep=1) as ckpt:
    with pytest.raises(ValueError, match='plain JSON'):
      ckpt.save(1, _state(), {'x': np.float32(1.0)})
    with pytest.raises(ValueError, match='plain JSON'):
      ckpt.save(1, _state(), {'x': float('nan')})
