"""Block weights stacked on a layer axis: the same parameters, checkpoints, logits and
samples as per-layer storage, and an update whose program does not grow with depth."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from safetensors.numpy import load_file

from graft_jax.models import layer_storage, load_hf, save_hf, token_logprobs
from graft_jax.models.decoder import init_model
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from test_remat_scan import QWEN3, SMOLLM3


def _params(model):
  return {k: np.asarray(v) for k, v in layer_storage.per_layer_params(model)}


@pytest.mark.parametrize("cfg", [SMOLLM3, QWEN3], ids=["smollm3", "qwen3"])
def test_stacking_keeps_every_parameter_and_unstacking_restores_the_layout(cfg):
  model = init_model(cfg, rngs=nnx.Rngs(5))
  want = _params(model)
  layout = jax.tree.map(lambda v: (v.get_value().shape, v.get_metadata()["logical_axes"]),
                        nnx.state(model, nnx.Param), is_leaf=lambda x: isinstance(x, nnx.Variable))
  model.set_memory_options(scan_layers=True)
  period = 4 if cfg is SMOLLM3 else 1
  assert model.layers is None and len(model.stacks) == period
  q = model.stacks[0].attn.q_DxNxH
  assert q.shape == (cfg.num_layers // period, cfg.hidden_size, cfg.num_heads, cfg.head_dim)
  assert q.get_metadata()["logical_axes"] == ("layers", "embed", "q_heads", "head_dim")
  # Entry k of stack j is layer k * period + j.
  got = _params(model)
  assert list(got) == list(want)  # the same paths in the same order
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)
  np.testing.assert_array_equal(np.asarray(model.stacks[period - 1].mlp.up_DxF[-1]),
                                want[f"layers.{cfg.num_layers - 1}.mlp.up_DxF"])
  model.set_memory_options(scan_layers=False)
  assert model.stacks is None
  back = jax.tree.map(lambda v: (v.get_value().shape, v.get_metadata()["logical_axes"]),
                      nnx.state(model, nnx.Param), is_leaf=lambda x: isinstance(x, nnx.Variable))
  assert back == layout
  for k, v in _params(model).items():
    np.testing.assert_array_equal(v, want[k], err_msg=k)


def test_a_stacked_model_saves_the_same_checkpoint(tmp_path):
  model = init_model(SMOLLM3, rngs=nnx.Rngs(1))
  save_hf(model, SMOLLM3, None, tmp_path / "per_layer")
  model.set_memory_options(scan_layers=True, remat="full")
  save_hf(model, SMOLLM3, None, tmp_path / "stacked")
  want = load_file(tmp_path / "per_layer" / "model.safetensors")
  got = load_file(tmp_path / "stacked" / "model.safetensors")
  assert list(got) == list(want)  # same keys, same order (layer by layer)
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)
  again, _ = load_hf(tmp_path / "stacked")
  for k, v in _params(again).items():
    np.testing.assert_array_equal(v, _params(model)[k], err_msg=k)


def test_sampling_from_stacked_storage_equals_per_layer_storage():
  model = init_model(SMOLLM3, rngs=nnx.Rngs(2))
  prompts = [[5, 6, 7, 8, 9], [10, 11]]
  params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=4)
  want = JaxSamplerEngine(model, eos_ids=2, pad_id=0).generate(prompts, 2, params)
  model.set_memory_options(scan_layers=True)
  got = JaxSamplerEngine(model, eos_ids=2, pad_id=0).generate(prompts, 2, params)
  for b in range(4):
    assert got.response_ids(b) == want.response_ids(b)
  np.testing.assert_allclose(got.logp_BxL, want.logp_BxL, atol=1e-5)


def _update_ops(num_layers: int) -> int:
  """Operations in the lowered program of one scanned Adam update (loss, gradient,
  clipping, optimizer) of a QWEN3-width model of the given depth."""
  cfg = dataclasses.replace(QWEN3, num_layers=num_layers, use_rope_layers=(1,) * num_layers)
  model = init_model(cfg, rngs=nnx.Rngs(0))
  model.set_memory_options(scan_layers=True, remat="full")
  graphdef, params = nnx.split(model, nnx.Param)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-4))
  ids = jnp.zeros((2, 8), jnp.int32)

  def update(params, opt):
    def loss(p):
      return -token_logprobs(nnx.merge(graphdef, p), ids, jnp.ones((2, 8), bool)).mean()
    grads = jax.grad(loss)(params)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt

  text = jax.jit(update).lower(params, tx.init(params)).as_text()
  return sum(1 for line in text.splitlines() if " = " in line)


def test_the_scanned_update_does_not_grow_with_depth():
  # Per-layer weights made every stack, unstack, norm term and Adam step one set of
  # operations per layer (the compile time grew linearly); stacked, the program is the
  # same however deep the model is.
  assert _update_ops(2) == _update_ops(6)
