"""FLOPs and bytes per phase: parameter counts against the models' own shapes, and each
formula against a sum written out by hand."""

import jax
import pytest
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.plan import costs

TINY = ModelConfig(model_type="qwen3", vocab_size=100, hidden_size=8, intermediate_size=12,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=4, qk_norm=True)


@pytest.mark.parametrize("cfg", [TINY, ModelConfig.qwen3_1p7b(), ModelConfig.smollm3_3b(),
                                 ModelConfig.llama3p2_3b()], ids=["tiny", "qwen3", "smollm3", "llama"])
def test_all_params_equals_the_models_own_arrays(cfg):
  model = nnx.eval_shape(lambda: init_model(cfg))
  assert costs.all_params(cfg) == sum(x.size for x in jax.tree.leaves(nnx.state(model)))


def test_matmul_params_by_hand():
  # per layer: q 8x16, k 8x8, v 8x8, o 16x8, MLP 3 x 8x12; LM head 8x100
  per_layer = 8 * 16 + 8 * 8 + 8 * 8 + 16 * 8 + 3 * 8 * 12
  assert costs.matmul_params(TINY) == 2 * per_layer + 800


def test_per_token_flops_by_hand():
  n = costs.matmul_params(TINY)
  # causal attention over T=10: query t reads t+1 keys; q.k and p.v are 2 d_attn each
  keys = sum(t + 1 for t in range(10)) / 10  # 5.5, about T/2
  fwd_attn = 2 * TINY.num_layers * 2 * 16 * keys
  assert costs.score_flops_per_token(TINY, 10) == pytest.approx(2 * n + fwd_attn, rel=0.1)
  assert costs.train_flops_per_token(TINY, 10) == 3 * costs.score_flops_per_token(TINY, 10)
  assert costs.decode_flops_per_token(TINY, 7) == 2 * n + TINY.num_layers * 2 * 2 * 16 * 7


def test_decode_bytes_and_ceiling_by_hand():
  kv = 2 * 2 * 2 * 4 * 2  # layers x (k, v) x kv heads x head_dim x bf16
  assert costs.kv_bytes_per_position(TINY) == kv
  bytes_step = 2 * costs.all_params(TINY) + 3 * 50 * kv
  assert costs.decode_bytes_per_step(TINY, 3, 50) == bytes_step
  assert costs.decode_tokens_per_s_ceiling(TINY, 3, 50, 1e12) == pytest.approx(3e12 / bytes_step)


def test_packed_row_attention_pairs_by_hand():
  """A row of 300 tokens holding sequences of 100, 60 and 40 (100 padding tokens)."""
  segments = [100, 60, 40]
  assert costs.attention_pairs(segments, 300, "cudnn_packed") == (100**2 + 60**2 + 40**2) / 2
  # 3 blocks of 128: tiles (0,0), (1,0), (1,1), (2,0), (2,1), (2,2), all computed
  assert costs.attention_pairs(segments, 300, "pallas", block=128) == 6 * 128 * 128
  assert costs.attention_pairs(segments, 300, "row") == 300 * 300 / 2
  # the 'row' count is F's: a row of T tokens costs T x F(T)
  for passes, per_token in ((1, costs.score_flops_per_token), (3, costs.train_flops_per_token)):
    matmul, attention = costs.packed_row_flops(TINY, segments, 300, "row", passes=passes)
    assert matmul + attention == pytest.approx(300 * per_token(TINY, 300))
  matmul, attention = costs.packed_row_flops(TINY, segments, 300, "cudnn_packed", passes=3)
  assert matmul == 6 * costs.matmul_params(TINY) * 300
  assert attention == 3 * 4 * TINY.num_layers * 16 * (100**2 + 60**2 + 40**2) / 2
