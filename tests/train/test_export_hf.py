"""Trainer.export_hf writes each trained policy's current weights as a Hugging Face folder."""

import json

import jax
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

from graft_jax.models import load_hf, load_tokenizer
from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

pytestmark = pytest.mark.slow  # two tiny models train for two steps


def test_export_writes_the_trained_weights_and_tokenizers(tmp_path):
  cfg = make_cfg("graft", tmp_path / "run")
  trainer = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(),
                    reward_fn=tiny_pair.contains_reward)
  try:
    trainer.run(2)
    folders = trainer.export_hf(tmp_path / "hf")
    halves = trainer.export_hf(tmp_path / "hf_bf16", dtype="bfloat16")
  finally:
    trainer.close()
  # The same seed: the weights training started from, named in the config's order.
  initial = dict(zip(trainer.policies, tiny_pair.make_models().values()))
  assert sorted(folders) == sorted(trainer.policies) == ["toy_a", "toy_b"]
  for name, policy in trainer.policies.items():
    exported, _ = load_hf(folders[name])
    want = jax.tree.leaves(nnx.state(policy.model))
    got = jax.tree.leaves(nnx.state(exported))
    assert len(got) == len(want)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    start = jax.tree.leaves(nnx.state(initial[name][0]))
    assert any(not np.array_equal(np.asarray(s), np.asarray(w)) for s, w in zip(start, want))
    assert load_tokenizer(folders[name]).get_vocab() == initial[name][1].get_vocab()

    # The bf16 export holds each live weight rounded to bfloat16 (numpy's own cast), at
    # half the bytes, and says so in config.json.
    assert json.loads((halves[name] / "config.json").read_text())["dtype"] == "bfloat16"
    half, _ = load_hf(halves[name])
    for g, w in zip(jax.tree.leaves(nnx.state(half)), want):
      rounded = np.asarray(w).astype(ml_dtypes.bfloat16).astype(np.float32)
      np.testing.assert_array_equal(np.asarray(g, np.float32), rounded)
    size = lambda d: sum(f.stat().st_size for f in d.glob("*.safetensors"))
    assert size(halves[name]) < 0.51 * size(folders[name])
