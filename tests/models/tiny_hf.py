"""Tiny random transformers checkpoints and tokenizers for the model and rollout tests.

Golden values come from these torch models, never from graft_jax.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers

VOCAB = 160

# One entry per family; each exercises a difference the decoder must honour.
TINY_CONFIGS = {
    # Explicit head_dim != hidden / heads, q/k norm, GQA 4:2, untied.
    "qwen3": dict(
        cls="Qwen3", vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        rms_norm_eps=1e-6, max_position_embeddings=512, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=1, eos_token_id=2, pad_token_id=0),
    # llama3 rope scaling with a short original context so every band is hit; GQA 4:1; tied.
    "llama": dict(
        cls="Llama", vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
        rms_norm_eps=1e-5, max_position_embeddings=512, tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32},
        bos_token_id=1, eos_token_id=2),
    # Four layers with layer 3 NoPE; tied; GQA 4:2.
    "smollm3": dict(
        cls="SmolLM3", vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        rms_norm_eps=1e-6, max_position_embeddings=512, tie_word_embeddings=True,
        no_rope_layers=[1, 1, 1, 0], no_rope_layer_interval=4,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        bos_token_id=1, eos_token_id=2, pad_token_id=0),
}


def make_hf_model(family: str, seed: int = 0, **overrides):
  """A random transformers model whose weights (norm gains included) are all non-trivial."""
  kwargs = dict(TINY_CONFIGS[family], **overrides)
  cls = kwargs.pop("cls")
  config = getattr(transformers, f"{cls}Config")(**kwargs)
  torch.manual_seed(seed)
  model = getattr(transformers, f"{cls}ForCausalLM")(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("norm.weight"):
        p.copy_(1.0 + 0.2 * torch.randn_like(p))
      else:
        p.copy_(0.08 * torch.randn_like(p))
  return model


def save_hf_model(family: str, out_dir: Path, seed: int = 0, **overrides):
  model = make_hf_model(family, seed, **overrides)
  model.save_pretrained(out_dir)
  return model


def hf_logits(model, ids: np.ndarray, attn_mask: np.ndarray | None = None) -> np.ndarray:
  with torch.no_grad():
    kw = {} if attn_mask is None else {"attention_mask": torch.tensor(attn_mask).long()}
    return model(torch.tensor(ids).long(), **kw).logits.float().numpy()


def random_ids(batch: int, length: int, seed: int = 0) -> np.ndarray:
  # Ids >= 3 keep pad/bos/eos out of the inputs.
  return np.random.default_rng(seed).integers(3, VOCAB, size=(batch, length)).astype(np.int32)


def make_tokenizer(out_dir: Path | None = None, *, eos: bool = True, pad: bool = True):
  """A word-level tokenizer over a few words, padded up to VOCAB entries."""
  from tokenizers import Tokenizer, models, pre_tokenizers

  words = ["<pad>", "<s>", "</s>"] + [f"w{i}" for i in range(VOCAB - 3)]
  vocab = {w: i for i, w in enumerate(words)}
  tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
  tok.pre_tokenizer = pre_tokenizers.Whitespace()
  special = {"bos_token": "<s>"}
  if eos:
    special["eos_token"] = "</s>"
  if pad:
    special["pad_token"] = "<pad>"
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **special)
  if out_dir is not None:
    fast.save_pretrained(str(out_dir))
  return fast


FAMILIES = tuple(TINY_CONFIGS)


class Checkpoint:
  """A saved tiny HF model: its folder and the torch model that wrote it."""

  def __init__(self, family: str, path: Path, hf_model):
    self.family, self.path, self.hf_model = family, path, hf_model


_CACHE: dict[str, Checkpoint] = {}


def checkpoint(family: str, root: Path) -> Checkpoint:
  """One saved checkpoint per family per test session (with a tokenizer)."""
  if family not in _CACHE:
    path = root / family
    hf_model = save_hf_model(family, path)
    make_tokenizer(path)
    _CACHE[family] = Checkpoint(family, path, hf_model)
  return _CACHE[family]
