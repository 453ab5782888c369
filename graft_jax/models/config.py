"""Frozen architecture description shared by the Qwen3, Llama 3.x and SmolLM3 decoders.

`ModelConfig.from_hf_config` reads a transformers `config.json` dict (both the
transformers 5 `rope_parameters` layout and the older `rope_theta`/`rope_scaling`
one); `to_hf_config` writes the transformers 5 layout back with the older keys beside it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

SUPPORTED_MODEL_TYPES = ("qwen3", "llama", "smollm3")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
_ARCHITECTURES = {
    "qwen3": "Qwen3ForCausalLM",
    "llama": "LlamaForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
}


class UnsupportedConfigError(ValueError):
  """A config.json asks for something these decoders do not implement."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Decoder hyperparameters; the family differences are plain fields.

  `use_rope_layers[i]` is 1 where layer i applies RoPE and 0 for a NoPE layer
  (SmolLM3's `no_rope_layers` convention). `qk_norm` is Qwen3's per-head
  RMSNorm on queries and keys.
  """

  model_type: str
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  rope_type: str = "default"
  rope_factor: float = 1.0
  rope_low_freq_factor: float = 1.0
  rope_high_freq_factor: float = 4.0
  rope_original_max_positions: int = 8192
  max_position_embeddings: int = 4096
  tie_word_embeddings: bool = False
  qk_norm: bool = False
  use_rope_layers: tuple[int, ...] = ()
  no_rope_layer_interval: int = 4
  bos_token_id: int | None = None
  eos_token_ids: tuple[int, ...] = ()
  pad_token_id: int | None = None

  def __post_init__(self):
    if self.model_type not in SUPPORTED_MODEL_TYPES:
      raise UnsupportedConfigError(
          f"unsupported model_type {self.model_type!r}; supported: {SUPPORTED_MODEL_TYPES}")
    if self.rope_type not in SUPPORTED_ROPE_TYPES:
      raise UnsupportedConfigError(
          f"unsupported rope_type {self.rope_type!r}; supported: {SUPPORTED_ROPE_TYPES}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                       f"num_kv_heads={self.num_kv_heads}")
    if not self.use_rope_layers:
      object.__setattr__(self, "use_rope_layers", (1,) * self.num_layers)
    if len(self.use_rope_layers) != self.num_layers:
      raise ValueError(f"use_rope_layers has {len(self.use_rope_layers)} entries for "
                       f"{self.num_layers} layers")

  # Presets: published config.json values of the models GRAFT trains.
  @classmethod
  def qwen3_1p7b(cls) -> ModelConfig:
    return cls(model_type="qwen3", vocab_size=151936, hidden_size=2048,
               intermediate_size=6144, num_layers=28, num_heads=16, num_kv_heads=8,
               head_dim=128, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
               max_position_embeddings=32768, tie_word_embeddings=True, qk_norm=True,
               bos_token_id=151643, eos_token_ids=(151643,))

  @classmethod
  def smollm3_3b(cls) -> ModelConfig:
    return cls(model_type="smollm3", vocab_size=128256, hidden_size=2048,
               intermediate_size=11008, num_layers=36, num_heads=16, num_kv_heads=4,
               head_dim=128, rms_norm_eps=1e-6, rope_theta=5_000_000.0,
               max_position_embeddings=65536, tie_word_embeddings=True,
               use_rope_layers=_nope_every(36, 4), bos_token_id=128000,
               eos_token_ids=(128001,), pad_token_id=128004)

  @classmethod
  def llama3p2_3b(cls) -> ModelConfig:
    """Llama 3.2 3B; OctoThinker-3B-Hybrid shares this architecture."""
    return cls(model_type="llama", vocab_size=128256, hidden_size=3072,
               intermediate_size=8192, num_layers=28, num_heads=24, num_kv_heads=8,
               head_dim=128, rms_norm_eps=1e-5, rope_theta=500_000.0, rope_type="llama3",
               rope_factor=32.0, rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
               rope_original_max_positions=8192, max_position_embeddings=131072,
               tie_word_embeddings=True, bos_token_id=128000, eos_token_ids=(128001,))

  @classmethod
  def from_hf_config(cls, hf: Mapping[str, Any]) -> ModelConfig:
    """Builds a config from a transformers `config.json` dict."""
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
      raise UnsupportedConfigError(
          f"unsupported model_type {model_type!r}; supported: {SUPPORTED_MODEL_TYPES}")
    if hf.get("hidden_act", "silu") != "silu":
      raise UnsupportedConfigError(f"hidden_act {hf['hidden_act']!r} (only 'silu')")
    for flag in ("attention_bias", "mlp_bias", "use_sliding_window"):
      if hf.get(flag):
        raise UnsupportedConfigError(f"{flag}=true is not supported ({model_type})")
    num_layers = hf["num_hidden_layers"]
    num_heads = hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or hf["hidden_size"] // num_heads
    rope = _read_rope(hf)
    use_rope_layers = (1,) * num_layers
    interval = int(hf.get("no_rope_layer_interval") or 4)
    if model_type == "smollm3":
      layers = hf.get("no_rope_layers") or _nope_every(num_layers, interval)
      use_rope_layers = tuple(int(v) for v in layers)
    eos = hf.get("eos_token_id")
    eos_ids = () if eos is None else tuple(eos) if isinstance(eos, (list, tuple)) else (eos,)
    tie_default = model_type == "smollm3"
    return cls(
        model_type=model_type, vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"], num_layers=num_layers,
        num_heads=num_heads, num_kv_heads=hf.get("num_key_value_heads") or num_heads,
        head_dim=head_dim, rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", tie_default)),
        qk_norm=model_type == "qwen3", use_rope_layers=use_rope_layers,
        no_rope_layer_interval=interval, bos_token_id=hf.get("bos_token_id"),
        eos_token_ids=eos_ids, pad_token_id=hf.get("pad_token_id"), **rope)

  def to_hf_config(self, *, dtype: str = "float32") -> dict[str, Any]:
    """The transformers 5 `config.json` dict for this architecture."""
    rope: dict[str, Any] = {"rope_theta": self.rope_theta, "rope_type": self.rope_type}
    if self.rope_type in ("linear", "llama3"):
      rope["factor"] = self.rope_factor
    if self.rope_type == "llama3":
      rope.update(low_freq_factor=self.rope_low_freq_factor,
                  high_freq_factor=self.rope_high_freq_factor,
                  original_max_position_embeddings=self.rope_original_max_positions)
    eos = self.eos_token_ids
    out: dict[str, Any] = {
        "architectures": [_ARCHITECTURES[self.model_type]],
        "model_type": self.model_type,
        "vocab_size": self.vocab_size,
        "hidden_size": self.hidden_size,
        "intermediate_size": self.intermediate_size,
        "num_hidden_layers": self.num_layers,
        "num_attention_heads": self.num_heads,
        "num_key_value_heads": self.num_kv_heads,
        "head_dim": self.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": self.rms_norm_eps,
        "max_position_embeddings": self.max_position_embeddings,
        "rope_parameters": rope,
        # The pre-5 keys too: a server whose transformers reads `rope_theta` would
        # otherwise take its 1e4 default (SmolLM3's is 5e6).
        "rope_theta": self.rope_theta,
        "rope_scaling": _legacy_rope_scaling(rope),
        "tie_word_embeddings": self.tie_word_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": self.bos_token_id,
        "eos_token_id": (eos[0] if len(eos) == 1 else list(eos)) if eos else None,
        "pad_token_id": self.pad_token_id,
        "use_cache": True,
        "dtype": dtype,
    }
    if self.model_type in ("llama", "smollm3"):
      out["mlp_bias"] = False
    if self.model_type in ("qwen3", "smollm3"):
      out["use_sliding_window"] = False
      out["sliding_window"] = None
    if self.model_type == "smollm3":
      out["no_rope_layers"] = list(self.use_rope_layers)
      out["no_rope_layer_interval"] = self.no_rope_layer_interval
    return out

  @property
  def rope_kwargs(self) -> dict[str, Any]:
    return dict(theta=self.rope_theta, rope_type=self.rope_type, factor=self.rope_factor,
                low_freq_factor=self.rope_low_freq_factor,
                high_freq_factor=self.rope_high_freq_factor,
                original_max_positions=self.rope_original_max_positions)


def _legacy_rope_scaling(rope: Mapping[str, Any]) -> dict[str, Any] | None:
  """transformers 4's `rope_scaling`: the scaling entries of `rope_parameters` (no theta),
  None for plain RoPE."""
  if rope["rope_type"] == "default":
    return None
  return {k: v for k, v in rope.items() if k != "rope_theta"}


def _nope_every(num_layers: int, interval: int) -> tuple[int, ...]:
  # transformers' SmolLM3Config default: every `interval`-th layer is NoPE.
  return tuple(int((i + 1) % interval != 0) for i in range(num_layers))


def _read_rope(hf: Mapping[str, Any]) -> dict[str, Any]:
  """RoPE fields from `rope_parameters` (transformers 5) or `rope_scaling` (4.x)."""
  params = dict(hf.get("rope_parameters") or {})
  legacy = hf.get("rope_scaling") or {}
  if not params:
    params = dict(legacy)
  theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type not in SUPPORTED_ROPE_TYPES:
    raise UnsupportedConfigError(
        f"unsupported rope_type {rope_type!r}; supported: {SUPPORTED_ROPE_TYPES}")
  if params.get("partial_rotary_factor", 1.0) != 1.0:
    raise UnsupportedConfigError("partial_rotary_factor != 1 is not supported")
  return dict(
      rope_theta=float(theta), rope_type=rope_type,
      rope_factor=float(params.get("factor", 1.0)),
      rope_low_freq_factor=float(params.get("low_freq_factor", 1.0)),
      rope_high_freq_factor=float(params.get("high_freq_factor", 4.0)),
      rope_original_max_positions=int(params.get(
          "original_max_position_embeddings",
          hf.get("max_position_embeddings", 8192) if rope_type == "llama3" else 8192)))
