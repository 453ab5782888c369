"""The two toy tokenizers: trained locally, different, lossless on the synthetic text."""

import pytest

from graft_jax.data.synthetic import make_synthetic
from graft_jax.toy.pair import prompt_text, response_text
from graft_jax.toy.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def corpus():
  problems = make_synthetic(("add", "sub", "mul", "lin", "fracadd", "cmp", "cadd", "cmul"), 60,
                            seed=3, difficulty=2)
  return [prompt_text(p.problem) + response_text(p.solution) for p in problems]


@pytest.fixture(scope="module")
def pair(corpus):
  return train_tokenizer(corpus, "qwen3", 300), train_tokenizer(corpus, "smollm3", 500)


def test_vocabularies_and_digit_rules_differ(pair):
  tok_a, tok_b = pair
  assert len(tok_a) != len(tok_b)
  assert tok_a.eos_token == "<|endoftext|>" and tok_b.eos_token == "<|end_of_text|>"
  assert tok_a.tokenize("Compute 47+385.")[1:6] == ["Ġ", "4", "7", "+", "3"]
  # Both split digits; B keeps a word with its leading space, A (byte-level) marks it with Ġ.
  assert tok_b.tokenize("Compute 47+385.")[1:5] == [" ", "4", "7", "+"]
  assert " carry" in tok_b.tokenize("Answer: carry up:") and "Ġcarry" not in tok_b.get_vocab()
  text = "Compute 47+38. Answer: 47+38=85. \\boxed{85}"
  assert tok_a.encode(text) != tok_b.encode(text)


@pytest.mark.parametrize("kind", [0, 1])
def test_round_trip_of_problem_text(pair, corpus, kind):
  tok = pair[kind]
  extra = ["Which is larger, 3/7 or 2/5?  x=-4. \\boxed{-4}\n", "Solve 3x-5=10."]
  for text in corpus[:50] + extra:
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == text


def test_pad_and_eos_are_distinct_specials(pair):
  for tok in pair:
    assert tok.pad_token_id != tok.eos_token_id
    assert {tok.eos_token_id, tok.pad_token_id} <= set(tok.all_special_ids)


def test_training_is_deterministic(corpus, pair):
  for tok, kind, size in zip(pair, ("qwen3", "smollm3"), (300, 500)):
    again = train_tokenizer(corpus, kind, size)
    assert again.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()


def test_unknown_kind_fails():
  with pytest.raises(ValueError, match="tokenizer kind"):
    train_tokenizer(["a"], "gpt2", 300)
