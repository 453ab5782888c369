"""Tiny fp32 policies vLLM's CPU backend can serve (head_dim 32), with different tokenizers.

Weights are redrawn larger than `init_model`'s so the next-token
distributions are far from uniform and log-prob comparisons mean something.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from graft_jax.models import ModelConfig, init_model
from tests.train import tiny_pair


def _spread(model, seed: int):
  """Norm gains ~ 1 + 0.2 N(0, 1), every other weight ~ 0.1 N(0, 1)."""
  graphdef, state = nnx.split(model)
  rng = np.random.default_rng(seed)
  def redraw(x):
    x = np.asarray(x)
    if np.all(x == 1.0):
      return (1.0 + 0.2 * rng.standard_normal(x.shape)).astype(x.dtype)
    return (0.1 * rng.standard_normal(x.shape)).astype(x.dtype)
  return nnx.merge(graphdef, jax.tree.map(redraw, state))


def make_pair(seed: int = 0):
  """{'a': (qwen3-like, BPE-280 tokenizer), 'b': (smollm3-like with a NoPE layer, BPE-320)}."""
  tok_a, tok_b = tiny_pair.make_tokenizer(280), tiny_pair.make_tokenizer(320)
  cfg_a = ModelConfig(model_type="qwen3", vocab_size=len(tok_a), hidden_size=64,
                      intermediate_size=128, num_layers=2, num_heads=2, num_kv_heads=1,
                      head_dim=32, qk_norm=True, max_position_embeddings=512,
                      eos_token_ids=(tok_a.eos_token_id,))
  cfg_b = ModelConfig(model_type="smollm3", vocab_size=len(tok_b), hidden_size=64,
                      intermediate_size=128, num_layers=4, num_heads=2, num_kv_heads=1,
                      head_dim=32, tie_word_embeddings=True, use_rope_layers=(1, 1, 1, 0),
                      rope_theta=100000.0, max_position_embeddings=512,
                      eos_token_ids=(tok_b.eos_token_id,))
  return {"a": (_spread(init_model(cfg_a, rngs=nnx.Rngs(seed)), seed), tok_a),
          "b": (_spread(init_model(cfg_b, rngs=nnx.Rngs(seed + 1)), seed + 1), tok_b)}
