"""The toy pair's recipe: architectures, tokenizers, warm-start mixtures, and its cache key.

Model A is Qwen3-like (QK-norm, RoPE in every layer, byte-level tokenizer that
splits digits); model B is SmolLM3-like (a NoPE layer, character tokenizer
with 2-digit number chunks), about three times larger. A is warm-started mostly on
additive families, B mostly on multiplicative ones, each with a little of the
other's so its pass rate there is low but not zero.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from graft_jax.models import ModelConfig
from graft_jax.toy.warm_start import SFTConfig

# The trainer's prompt is problem + suffix; the toy config must use this one.
PROMPT_SUFFIX = " Answer:"
# Bump when the build code changes what it produces for the same settings.
RECIPE_VERSION = 2
DEFAULT_ROOT = "runs/toy_pair"


@dataclasses.dataclass(frozen=True)
class ToyModelSpec:
  """One toy model: architecture, tokenizer, and warm-start data and schedule.

  `mixture` lists (family, number of distinct training problems, difficulty).
  """

  name: str
  model_type: str  # "qwen3" | "smollm3"; also picks the tokenizer kind
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  mixture: tuple[tuple[str, int, int], ...]
  sft: SFTConfig = SFTConfig()
  no_rope_layers: tuple[int, ...] = ()  # smollm3: 1 = RoPE, 0 = NoPE

  def model_config(self, vocab_size: int, eos_id: int, pad_id: int,
                   max_positions: int) -> ModelConfig:
    """The ModelConfig, made the way `load_hf` reads it back from config.json."""
    hf: dict[str, Any] = dict(
        model_type=self.model_type, vocab_size=vocab_size, hidden_size=self.hidden_size,
        intermediate_size=self.intermediate_size, num_hidden_layers=self.num_layers,
        num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
        head_dim=self.head_dim, rms_norm_eps=1e-6, max_position_embeddings=max_positions,
        tie_word_embeddings=True, rope_theta=10000.0, bos_token_id=None,
        eos_token_id=eos_id, pad_token_id=pad_id)
    if self.model_type == "smollm3":
      hf["no_rope_layers"] = list(self.no_rope_layers or (1,) * self.num_layers)
    return ModelConfig.from_hf_config(hf)

  @property
  def families(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for f, _, _ in self.mixture))


@dataclasses.dataclass(frozen=True)
class ToyPairConfig:
  """Everything that determines the built pair (and so its cache key).

  `groups` names the family groups of the pass-rate table; held-out eval
  problems (`eval_per_family` per family, `eval_samples` samples each at
  temperature 1) are excluded from both models' training data.
  """

  model_a: ToyModelSpec
  model_b: ToyModelSpec
  seed: int = 0
  difficulty: int = 2
  max_len: int = 64  # prompt + response + EOS, in either tokenizer
  groups: tuple[tuple[str, tuple[str, ...]], ...] = (
      ("additive", ("add", "sub")), ("multiplicative", ("mul",)))
  eval_per_family: int = 64
  eval_samples: int = 4
  max_new_tokens: int = 48

  @property
  def eval_families(self) -> tuple[str, ...]:
    return tuple(f for _, fams in self.groups for f in fams)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def default_config(seed: int = 0) -> ToyPairConfig:
  """The embedded default's pair (under a minute of CPU per model).

  B also sees the one-digit times table, which lifts its two-digit products.
  The SFT step counts sit where each model has learned its own families but
  not saturated them (pass rates at T=1 on held-out problems: A 60% additive,
  5% multiplicative; B 2% additive, 43% multiplicative), so both have mixed
  groups on their own side and all-fail groups on the peer's. A at 350 steps
  is near 4% on addition and at 1,100 steps near 97%.
  Heads are 32 wide: vLLM's CPU attention backend refuses head_dim 16, and the
  pair must also serve from vLLM sidecars (`configs/toy.py:vllm`).
  """
  a = ToyModelSpec(
      name="toy_a", model_type="qwen3", vocab_size=300, hidden_size=64,
      intermediate_size=192, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=32,
      mixture=(("add", 1500, 2), ("sub", 1500, 2), ("mul", 40, 2)),
      sft=SFTConfig(steps=650, batch_size=32, lr=3e-3))
  b = ToyModelSpec(
      name="toy_b", model_type="smollm3", vocab_size=256, hidden_size=96,
      intermediate_size=192, num_layers=4, num_heads=3, num_kv_heads=1, head_dim=32,
      no_rope_layers=(1, 1, 1, 0),
      mixture=(("mul", 800, 2), ("mul", 100, 1), ("add", 40, 2), ("sub", 40, 2)),
      sft=SFTConfig(steps=700, batch_size=32, lr=5e-3, weight_decay=0.1))
  return ToyPairConfig(model_a=a, model_b=b, seed=seed)


def tiny_config(seed: int = 0) -> ToyPairConfig:
  """A seconds-long build for tests: same structure, trivial training."""
  cfg = default_config(seed)
  sft = SFTConfig(steps=4, batch_size=8, warmup_steps=2)
  a = dataclasses.replace(cfg.model_a, hidden_size=32, intermediate_size=64, num_layers=1,
                          head_dim=8, mixture=(("add", 40, 2), ("mul", 4, 2)), sft=sft)
  b = dataclasses.replace(cfg.model_b, hidden_size=32, intermediate_size=64, num_layers=2,
                          head_dim=8, no_rope_layers=(1, 0),
                          mixture=(("mul", 40, 2), ("add", 4, 2)), sft=sft)
  return dataclasses.replace(cfg, model_a=a, model_b=b, eval_per_family=4, eval_samples=2,
                             max_new_tokens=8)


def cache_key(cfg: ToyPairConfig) -> str:
  """sha256 over the settings, the recipe version and the synthetic generator's source."""
  from graft_jax.data import synthetic, synthetic_families  # pylint: disable=import-outside-toplevel

  h = hashlib.sha256()
  h.update(json.dumps({"recipe": RECIPE_VERSION, "prompt_suffix": PROMPT_SUFFIX,
                       "config": cfg.to_json()}, sort_keys=True).encode())
  for module in (synthetic, synthetic_families):
    h.update(Path(module.__file__).read_bytes())
  return h.hexdigest()[:16]
