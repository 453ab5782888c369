"""How many parameters a model has, from its config alone.

The planner's cost model (graft_jax.plan.costs) and the trainer's MFU and memory
reports both count with these, so they live with the model, below both.
"""

from __future__ import annotations

from graft_jax.models.config import ModelConfig


def matmul_params(cfg: ModelConfig) -> int:
  """N: the weights of every matrix product a token goes through, LM head included."""
  d, h = cfg.hidden_size, cfg.head_dim
  attn = d * h * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
  mlp = 3 * d * cfg.intermediate_size
  return cfg.num_layers * (attn + mlp) + cfg.vocab_size * d


def all_params(cfg: ModelConfig) -> int:
  """Every parameter: the products' weights, the embedding (unless tied) and the norms."""
  embed = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
  norms = cfg.num_layers * (2 * cfg.hidden_size + (2 * cfg.head_dim if cfg.qk_norm else 0))
  return matmul_params(cfg) + embed + norms + cfg.hidden_size


def attn_width(cfg: ModelConfig) -> int:
  """d_attn = num_heads * head_dim: the width a query attends with, per layer."""
  return cfg.num_heads * cfg.head_dim
