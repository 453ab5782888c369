"""The Hugging Face <-> NNX parameter table: key patterns, module paths, layout changes.

One row per tensor kind; `{i}` is the layer index. Loading and saving both read
this table, so save is the exact inverse of load.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
  """How an HF tensor becomes an NNX parameter, and back.

  `to_nnx`/`to_hf` take the array and the NNX shape; `hf_shape` maps the NNX
  shape to the shape the checkpoint must hold.
  """

  name: str
  to_nnx: Callable[[np.ndarray, tuple], np.ndarray]
  to_hf: Callable[[np.ndarray, tuple], np.ndarray]
  hf_shape: Callable[[tuple], tuple]


SAME = Layout("same", lambda a, s: a, lambda a, s: a, lambda s: tuple(s))
# nn.Linear stores (out, in); the einsum weights are (in, out).
LINEAR = Layout("linear", lambda a, s: a.T, lambda a, s: a.T, lambda s: (s[1], s[0]))
# q/k/v_proj (N*H, D) -> (D, N, H).
HEADS_OUT = Layout(
    "heads_out",
    lambda a, s: a.reshape(s[1], s[2], s[0]).transpose(2, 0, 1),
    lambda a, s: a.transpose(1, 2, 0).reshape(s[1] * s[2], s[0]),
    lambda s: (s[1] * s[2], s[0]))
# o_proj (D, N*H) -> (N, H, D).
HEADS_IN = Layout(
    "heads_in",
    lambda a, s: a.reshape(s[2], s[0], s[1]).transpose(1, 2, 0),
    lambda a, s: a.transpose(2, 0, 1).reshape(s[2], s[0] * s[1]),
    lambda s: (s[2], s[0] * s[1]))

_L = "model.layers.{i}."
# (HF key pattern, NNX path pattern, layout)
KEY_TABLE: tuple[tuple[str, str, Layout], ...] = (
    ("model.embed_tokens.weight", "embedding_VxD", SAME),
    ("lm_head.weight", "lm_head_DxV", LINEAR),
    ("model.norm.weight", "final_norm.scale_D", SAME),
    (_L + "input_layernorm.weight", "layers.{i}.input_norm.scale_D", SAME),
    (_L + "post_attention_layernorm.weight", "layers.{i}.post_attn_norm.scale_D", SAME),
    (_L + "self_attn.q_proj.weight", "layers.{i}.attn.q_DxNxH", HEADS_OUT),
    (_L + "self_attn.k_proj.weight", "layers.{i}.attn.k_DxKxH", HEADS_OUT),
    (_L + "self_attn.v_proj.weight", "layers.{i}.attn.v_DxKxH", HEADS_OUT),
    (_L + "self_attn.o_proj.weight", "layers.{i}.attn.o_NxHxD", HEADS_IN),
    (_L + "self_attn.q_norm.weight", "layers.{i}.attn.q_norm.scale_D", SAME),
    (_L + "self_attn.k_norm.weight", "layers.{i}.attn.k_norm.scale_D", SAME),
    (_L + "mlp.gate_proj.weight", "layers.{i}.mlp.gate_DxF", LINEAR),
    (_L + "mlp.up_proj.weight", "layers.{i}.mlp.up_DxF", LINEAR),
    (_L + "mlp.down_proj.weight", "layers.{i}.mlp.down_FxD", LINEAR),
)

# Keys some checkpoints carry that hold no parameter of ours (RoPE buffers).
IGNORED_HF_KEYS = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")


def _compile(pattern: str) -> re.Pattern:
  return re.compile(re.escape(pattern).replace(r"\{i\}", r"(?P<i>\d+)") + "$")


_HF_RE = tuple((_compile(hf), nnx, layout) for hf, nnx, layout in KEY_TABLE)
_NNX_RE = tuple((_compile(nnx), hf, layout) for hf, nnx, layout in KEY_TABLE)


def hf_to_nnx(hf_key: str) -> tuple[str, Layout] | None:
  """The NNX path and layout for an HF key, or None when no row matches."""
  for regex, nnx_pattern, layout in _HF_RE:
    m = regex.match(hf_key)
    if m:
      return nnx_pattern.format(**m.groupdict()), layout
  return None


def nnx_to_hf(nnx_path: str) -> tuple[str, Layout]:
  """The HF key and layout for an NNX parameter path."""
  for regex, hf_pattern, layout in _NNX_RE:
    m = regex.match(nnx_path)
    if m:
      return hf_pattern.format(**m.groupdict()), layout
  raise KeyError(f"no HF key for parameter {nnx_path!r}")
