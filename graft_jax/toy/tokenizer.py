"""Two small BPE tokenizers, trained locally, that split text the way their families do.

Qwen-like (model A): byte-level BPE, every digit its own token. SmolLM3-like
(model B): character BPE over printable ASCII whose pre-tokens keep a word with
its leading space and punctuation (" up:", "."), also one token per digit.
Both split digits, although Llama 3 chunks numbers by three: over multi-digit
tokens the carry digit of a column trace is part of a token, which a model of
the toy's size does not learn. Different vocabularies, byte-level vs
character alphabets and different word splits keep the tokenizers
incompatible, as in the paper's pairs, though closer than real ones.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

KINDS = ("qwen3", "smollm3")
# (eos, pad, extra specials) per kind, spelled as the real families spell them.
SPECIALS = {
    "qwen3": ("<|endoftext|>", "<|pad|>", ()),
    "smollm3": ("<|end_of_text|>", "<|finetune_right_pad_id|>", ("<unk>",)),
}
_ASCII = [chr(c) for c in range(32, 127)] + ["\n"]


def train_tokenizer(texts: Iterable[str], kind: str, vocab_size: int):
  """A `transformers` fast tokenizer of `kind` trained on `texts` (deterministic).

  The vocabulary stops short of `vocab_size` when the texts run out of merges.
  """
  if kind not in KINDS:
    raise ValueError(f"tokenizer kind {kind!r}; expected one of {KINDS}")
  import transformers  # slow import; only when a tokenizer is built.

  eos, pad, extra = SPECIALS[kind]
  if kind == "qwen3":
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
  else:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(
        Regex(r"\p{N}| ?[^\s\p{N}]+|\s+"), "isolated")
    tok.decoder = decoders.Fuse()
    alphabet = _ASCII
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[eos, pad, *extra],
                                initial_alphabet=alphabet, show_progress=False)
  tok.train_from_iterator(list(texts), trainer)
  kwargs = {"unk_token": "<unk>"} if "<unk>" in extra else {}
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, eos_token=eos, pad_token=pad,
      clean_up_tokenization_spaces=False, **kwargs)
