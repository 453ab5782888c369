"""FLOPs and HBM bytes of each phase of a step, from the architecture alone.

N is the parameters a token's matrix products touch: every block's q/k/v/o and
gated-MLP weights and the LM head (the embedding lookup is a gather, not a
product). Per layer, d_attn = num_heads * head_dim. For a row of T tokens, the
causal attention of one token reads T/2 keys on average, so:

.. math::
    F_{train}(T) = 6N + 6 L T d_{attn}   \\qquad (\\text{forward + backward, PaLM's count halved for causality})

    F_{score}(T) = 2N + 2 L T d_{attn}   \\qquad (\\text{forward only})

    F_{decode}(S) = 2N + 4 L S d_{attn}  \\qquad (\\text{one new token over } S \\text{ cached ones})

F counts a row's attention as its causal triangle, T^2/2 (query, key) pairs at
4 d_attn FLOPs per layer and pass (forward 1, forward and backward 3). A packed row
(sequences n_1, n_2, ... in one row) computes what its kernel computes
(`packed_row_flops`): cuDNN's packed layout each sequence's triangle,
sum_s n_s^2 / 2; the Pallas GPU kernel every causal tile of b x b of the whole row,
b^2 m (m + 1) / 2 for m = ceil(T / b) blocks, its tiles across sequences computed and
masked after.

MFU divides the measured tokens/s times F by the device's peak, the usual
convention: rematerialisation's extra forward is not counted as useful work.
A decode step is bound by memory, not arithmetic: each step reads every weight
once for the whole batch and each row's cached keys and values,

.. math::
    B_{decode}(S) = w N_{all} + b\\, S\\, L\\, 2 K h\\, c ,

with w and c the bytes per weight and per cached value, N_all every parameter,
b the rows decoding and K h the kv-head width; ``b / (B / \\text{bandwidth})`` is
the sampler's HBM-bound ceiling in tokens/s.
"""

from __future__ import annotations

from graft_jax.models.config import ModelConfig
from graft_jax.models.size import all_params, attn_width, matmul_params  # pylint: disable=unused-import


def train_flops_per_token(cfg: ModelConfig, length: int) -> float:
  """F_train(T): forward and backward of one token in a row of ``length`` tokens."""
  return 6.0 * matmul_params(cfg) + 6.0 * cfg.num_layers * length * attn_width(cfg)


def score_flops_per_token(cfg: ModelConfig, length: int) -> float:
  """F_score(T): the forward pass of one token (old log-probs, the gate, a reference)."""
  return 2.0 * matmul_params(cfg) + 2.0 * cfg.num_layers * length * attn_width(cfg)


def attention_pairs(segments, row_length: int, kernel: str, *, block: int = 128) -> float:
  """The (query, key) pairs ``kernel`` computes in a row of ``row_length`` holding
  sequences of ``segments`` tokens: 'cudnn_packed' each sequence's triangle, 'pallas'
  every causal ``block`` tile of the row, 'row' the row's triangle (F's count)."""
  if kernel == "cudnn_packed":
    return sum(n * n for n in segments) / 2
  if kernel == "pallas":
    m = -(-row_length // block)
    return block * block * m * (m + 1) / 2
  return row_length * row_length / 2


def packed_row_flops(cfg: ModelConfig, segments, row_length: int, kernel: str, *,
                     passes: int) -> tuple[float, float]:
  """(matrix products, attention) FLOPs of one packed row of ``row_length`` tokens
  (padding computed too) by ``kernel`` (`attention_pairs`), over ``passes`` (1: forward,
  3: forward and backward). With 'row', their sum is ``row_length`` x F."""
  attention = 4.0 * cfg.num_layers * attn_width(cfg) * attention_pairs(segments, row_length,
                                                                        kernel)
  return 2.0 * passes * matmul_params(cfg) * row_length, passes * attention


def decode_flops_per_token(cfg: ModelConfig, context: int) -> float:
  """F_decode(S): one sampled token over ``context`` cached positions."""
  return 2.0 * matmul_params(cfg) + 4.0 * cfg.num_layers * context * attn_width(cfg)


def kv_bytes_per_position(cfg: ModelConfig, cache_bytes: int = 2) -> int:
  """One cached position of one row: keys and values of every layer."""
  return cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * cache_bytes


def decode_bytes_per_step(cfg: ModelConfig, rows: int, context: int, *, weight_bytes: int = 2,
                          cache_bytes: int = 2) -> float:
  """B_decode(S): the HBM bytes one decode step reads for ``rows`` rows."""
  return (weight_bytes * all_params(cfg)
          + rows * context * kv_bytes_per_position(cfg, cache_bytes))


def decode_tokens_per_s_ceiling(cfg: ModelConfig, rows: int, context: int, bandwidth: float, *,
                                weight_bytes: int = 2, cache_bytes: int = 2) -> float:
  """The HBM-bound rate of a decode step: ``rows`` tokens per B_decode / bandwidth."""
  return rows * bandwidth / decode_bytes_per_step(cfg, rows, context, weight_bytes=weight_bytes,
                                                  cache_bytes=cache_bytes)
