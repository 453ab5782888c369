"""Tiny random policies with different architectures and different locally trained tokenizers
(a pair, and a third for runs of three models).

The task is a verifiable toy: "Say <c>." is solved by any response that
contains the character c. Random models solve it sometimes, so every method
sees mixed, all-fail and all-pass groups.
"""

from __future__ import annotations

import dataclasses
import string

import numpy as np
from flax import nnx

from graft_jax.models import ModelConfig, init_model

ALPHABET = string.ascii_lowercase[:12] + string.digits


@dataclasses.dataclass(frozen=True)
class Problem:
  id: str
  problem: str
  answer: str


def problems(num: int = 64, seed: int = 0):
  rng = np.random.default_rng(seed)
  return [Problem(f"say-{i}", f"Say {c}.", c) for i, c in
          enumerate(rng.choice(list(ALPHABET), size=num))]


def contains_reward(texts, golds):
  """1 when the gold character appears in the response."""
  return np.array([float(g in t) for t, g in zip(texts, golds)], np.float32), None


def make_tokenizer(vocab_size: int):
  """A byte-level BPE of the given size, trained on the task's text."""
  import transformers
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<eos>"],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  corpus = [f"Say {c}. {c}{d} {d}{c}" for c in ALPHABET for d in ALPHABET]
  tok.train_from_iterator(corpus, trainer)
  return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>",
                                              pad_token="<pad>")


def make_models(seed: int = 0):
  """{'a': (qwen3-like decoder, tokenizer), 'b': (smollm3-like decoder, tokenizer)}."""
  tok_a, tok_b = make_tokenizer(280), make_tokenizer(320)
  cfg_a = ModelConfig(model_type="qwen3", vocab_size=len(tok_a), hidden_size=32,
                      intermediate_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                      head_dim=16, qk_norm=True)
  cfg_b = ModelConfig(model_type="smollm3", vocab_size=len(tok_b), hidden_size=48,
                      intermediate_size=64, num_layers=4, num_heads=4, num_kv_heads=2,
                      head_dim=12, tie_word_embeddings=True, use_rope_layers=(1, 1, 1, 0))
  return {"a": (init_model(cfg_a, rngs=nnx.Rngs(seed)), tok_a),
          "b": (init_model(cfg_b, rngs=nnx.Rngs(seed + 1)), tok_b)}


def make_third_model(seed: int = 2):
  """A third policy, unlike both of ``make_models``: a llama-like decoder and a
  tokenizer of its own size (``(decoder, tokenizer)``)."""
  tok = make_tokenizer(300)
  cfg = ModelConfig(model_type="llama", vocab_size=len(tok), hidden_size=32,
                    intermediate_size=48, num_layers=1, num_heads=2, num_kv_heads=2,
                    head_dim=16, tie_word_embeddings=False)
  return init_model(cfg, rngs=nnx.Rngs(seed)), tok


def make_trio(seed: int = 0):
  """{'a', 'b', 'c'}: ``make_models`` plus ``make_third_model``."""
  return {**make_models(seed), "c": make_third_model(seed + 2)}
