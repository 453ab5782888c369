"""load_tokenizer: AutoTokenizer from a local folder, with EOS required and PAD ensured."""

import json
import logging

import pytest
import tiny_hf

from graft_jax.models import TokenizerError, load_tokenizer


def test_loads_local_tokenizer(tmp_path):
  tiny_hf.make_tokenizer(tmp_path)
  tok = load_tokenizer(tmp_path)
  assert tok.eos_token_id == 2 and tok.pad_token_id == 0
  assert tok("w5 w6")["input_ids"] == [8, 9]


def test_missing_eos_fails_clearly(tmp_path):
  tiny_hf.make_tokenizer(tmp_path, eos=False)
  with pytest.raises(TokenizerError, match="no EOS token"):
    load_tokenizer(tmp_path)


def test_missing_eos_falls_back_to_config(tmp_path, caplog):
  tiny_hf.make_tokenizer(tmp_path, eos=False)
  (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 2}))
  with caplog.at_level(logging.WARNING):
    assert load_tokenizer(tmp_path).eos_token == "</s>"
  assert "no EOS token" in caplog.text


def test_missing_pad_is_added_and_reported(tmp_path, caplog):
  tiny_hf.make_tokenizer(tmp_path, pad=False)
  with caplog.at_level(logging.WARNING):
    tok = load_tokenizer(tmp_path)
  assert tok.pad_token == "</s>" and tok.pad_token_id == 2
  assert "no PAD token" in caplog.text
