"""Tokenizer loading from a local HF folder, with the EOS/PAD checks the sampler needs."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class TokenizerError(ValueError):
  """The tokenizer cannot be used for generation as it stands."""


def load_tokenizer(path: str | os.PathLike):
  """`transformers.AutoTokenizer` from `path`, guaranteed to have EOS and PAD ids.

  EOS falls back to config.json's `eos_token_id`; without either this raises
  TokenizerError. A missing PAD becomes config.json's `pad_token_id` token, or
  else the EOS token; either way a warning says so (the sampler masks pads,
  so sharing the EOS id is safe).
  """
  from transformers import AutoTokenizer  # transformers import is slow; only here.

  path = Path(path)
  tok = AutoTokenizer.from_pretrained(str(path))
  hf_cfg = {}
  if (path / "config.json").is_file():
    hf_cfg = json.loads((path / "config.json").read_text())
  if tok.eos_token_id is None:
    eos = hf_cfg.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) and eos else eos
    if eos is None:
      raise TokenizerError(f"{path}: the tokenizer has no EOS token and config.json has no "
                           f"eos_token_id; generation could never stop")
    tok.eos_token = tok.convert_ids_to_tokens(int(eos))
    log.warning("%s: tokenizer had no EOS token; using config.json eos_token_id=%d (%r)",
                path, eos, tok.eos_token)
  if tok.pad_token_id is None:
    pad = hf_cfg.get("pad_token_id")
    tok.pad_token = tok.convert_ids_to_tokens(int(pad)) if pad is not None else tok.eos_token
    log.warning("%s: tokenizer had no PAD token; added PAD=%r (id %d)", path,
                tok.pad_token, tok.pad_token_id)
  return tok
