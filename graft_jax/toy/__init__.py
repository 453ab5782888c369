"""The embedded default's toy heterogeneous pair: tiny Qwen3-like and SmolLM3-like
decoders with locally trained tokenizers, warm-started on complementary synthetic math."""

from graft_jax.toy.pair import ToyPair, ensure_toy_pair
from graft_jax.toy.spec import (DEFAULT_ROOT, FRICTION_ROOT, PROMPT_SUFFIX, REGIMES, TRIO_ROOT,
                                ToyFrictionConfig, ToyGroupConfig, ToyModelSpec, ToyPairConfig,
                                cache_key, default_config, friction_config, tiny_config,
                                tiny_friction_config, tiny_trio_config, trio_config)
from graft_jax.toy.tokenizer import train_tokenizer
from graft_jax.toy.warm_start import SFTConfig, sft_loss, train_sft

__all__ = [
    "DEFAULT_ROOT", "FRICTION_ROOT", "PROMPT_SUFFIX", "REGIMES", "SFTConfig", "TRIO_ROOT",
    "ToyFrictionConfig", "ToyGroupConfig", "ToyModelSpec", "ToyPair", "ToyPairConfig",
    "cache_key", "default_config", "ensure_toy_pair", "friction_config", "sft_loss",
    "tiny_config", "tiny_friction_config", "tiny_trio_config", "train_sft", "train_tokenizer",
    "trio_config",
]
