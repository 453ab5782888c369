"""ConfigDict -> typed dataclasses (key and type checks), and config files.

Config files under configs/ are imported by path: configs/ is not a package.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import pathlib
import sys
import types
import typing
from typing import Any, Mapping

from graft_jax.train.config_checks import ConfigError


def build_dataclass(cls: type, mapping: Mapping[str, Any],
                    prefix: str = '') -> Any:
  """Builds nested frozen dataclass `cls` from a mapping, checking types.

  Missing keys keep the dataclass defaults; unknown keys raise.
  """
  if not isinstance(mapping, Mapping):
    raise ConfigError(f'{prefix.rstrip(".") or "config"} must be a mapping, '
                      f'got {mapping!r}')
  hints = typing.get_type_hints(cls)
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(mapping) - names)
  if unknown:
    raise ConfigError(f'unknown config key {prefix}{unknown[0]} '
                      f'(known: {", ".join(sorted(names))})')
  kwargs = {}
  for name, value in mapping.items():
    hint = hints[name]
    if dataclasses.is_dataclass(hint):
      kwargs[name] = build_dataclass(hint, value, prefix=f'{prefix}{name}.')
    else:
      kwargs[name] = _coerce(f'{prefix}{name}', hint, value)
  return cls(**kwargs)


def _coerce(field: str, hint: Any, value: Any) -> Any:
  """Checks one leaf's type; ints are accepted for floats, lists for tuples."""
  origin = typing.get_origin(hint)
  if origin is tuple:
    if not isinstance(value, (tuple, list)):
      raise ConfigError(f'{field} must be a tuple, got {value!r}')
    args = typing.get_args(hint)
    if len(args) == 2 and args[1] is Ellipsis:
      return tuple(_coerce(field, args[0], v) for v in value)
    if len(value) != len(args):
      raise ConfigError(
          f'{field} must have {len(args)} entries, got {tuple(value)!r}')
    return tuple(_coerce(field, a, v) for a, v in zip(args, value))
  # bool is an int subclass: a flag typo like `n=True` must not pass as 1.
  if hint is bool:
    ok = isinstance(value, bool)
  elif hint is int:
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif hint is float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    value = float(value) if ok else value
  elif hint is str:
    ok = isinstance(value, str)
  else:
    raise TypeError(f'unsupported config type {hint} for {field}')
  if not ok:
    raise ConfigError(
        f'{field} must be {hint.__name__}, got {type(value).__name__} '
        f'{value!r}')
  return value


def import_config_file(path: str | pathlib.Path) -> types.ModuleType:
  """Imports a `configs/*.py` file by path (configs/ is not a package)."""
  path = pathlib.Path(path).resolve()
  name = f'_graft_config_{path.stem}_{abs(hash(str(path)))}'
  if name in sys.modules:
    return sys.modules[name]
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None or spec.loader is None:
    raise ConfigError(f'cannot import config file {path}')
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


def load_config(spec: str) -> Any:
  """Loads 'path/to/config.py[:arg]' the way `config_flags` does."""
  path, _, arg = spec.partition(':')
  module = import_config_file(path)
  return module.get_config(arg) if arg else module.get_config()


def apply_overrides(config_dict, overrides) -> None:
  """Applies 'dotted.field=value' strings to a ConfigDict, as `--config.dotted.field=value` does.

  Values are Python literals (``3e-4``, ``32``, ``True``, ``(1, 2)``); anything
  else is taken as a string. An unknown field or a wrong type raises
  ``ConfigError`` naming the override.
  """
  for item in overrides:
    key, sep, text = item.partition('=')
    if not sep or not key:
      raise ConfigError(f'override {item!r} must look like field.name=value')
    try:
      value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      value = text
    *parents, leaf = key.split('.')
    node = config_dict
    try:
      for p in parents:
        node = node[p]
      if leaf not in node:
        raise KeyError(leaf)
      if isinstance(node[leaf], float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
      node[leaf] = value
    except KeyError as e:
      raise ConfigError(f'override {item!r}: no config field {key!r}') from e
    except TypeError as e:
      raise ConfigError(f'override {item!r}: {e}') from e
