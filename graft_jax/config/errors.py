"""The config's errors and its did-you-mean: the bottom of the config package.

Anything that reports a bad config field (the loader, the checks, a method's own
checks in graft_jax.train.methods) raises these, so they import nothing of the project.
"""

from __future__ import annotations

import difflib
from typing import Iterable

# Fields that moved: the dotted name a config.json of older code stores (and an
# override may still use) -> the field's name now.
MOVED = {
    **{f: f'perf.{f}' for f in ('micro_batch_tokens', 'remat', 'scan_layers', 'attention_impl',
                                'attention_block', 'decode_attention', 'compile_cache_dir')},
    'rollout.max_kv_bytes': 'perf.sampler_max_kv_bytes',
    'rollout.streams': 'perf.sampler_streams',
}


class ConfigError(ValueError):
  """An impossible config value or combination; the message names the field.

  ``field`` is the dotted field when one is to blame, so a launcher can name
  the flag that set it.
  """

  def __init__(self, message: str, *, field: str | None = None):
    super().__init__(message)
    self.field = field


class PathError(FileNotFoundError):
  """A file or folder the config names is missing or unusable; names the field."""

  def __init__(self, field: str, message: str):
    super().__init__(f'{field}: {message}')
    self.field = field


def did_you_mean(name: str, known: Iterable[str]) -> str:
  """`` (did you mean 'x'?)`` for the closest of ``known``, or ``''``; a field's old
  dotted name (``MOVED``) suggests its new one."""
  known = list(known)
  new = MOVED.get(name)
  close = [new] if new in known else difflib.get_close_matches(name, known, n=1, cutoff=0.6)
  return f' (did you mean {close[0]!r}?)' if close else ''
