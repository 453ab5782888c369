"""Flax NNX decoders (Qwen3, Llama 3.x, SmolLM3), HF checkpoints, tokenizers, log-probs."""

from graft_jax.models.config import ModelConfig, UnsupportedConfigError
from graft_jax.models.decoder import Decoder, init_model, positions_from_mask
from graft_jax.models.hf_io import CheckpointError, load_hf, save_hf
from graft_jax.models.logprobs import (PackedPairs, pack_pairs, token_logprobs,
                                       token_logprobs_jit)
from graft_jax.models.tokenizer import TokenizerError, load_tokenizer

__all__ = [
    "CheckpointError", "Decoder", "ModelConfig", "PackedPairs", "TokenizerError",
    "UnsupportedConfigError", "init_model", "load_hf", "load_tokenizer", "pack_pairs",
    "positions_from_mask", "save_hf", "token_logprobs", "token_logprobs_jit",
]
