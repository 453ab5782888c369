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

from graft_jax.config.checks import ConfigError, did_you_mean


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
    if len(args) == 2 and args[1] is Ellipsis and dataclasses.is_dataclass(args[0]):
      # An entry may be a mapping, a ConfigDict or the dataclass itself.
      return tuple(build_dataclass(args[0], _as_mapping(v), prefix=f'{field}[{i}].')
                   for i, v in enumerate(value))
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


def _as_mapping(value: Any) -> Any:
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return dataclasses.asdict(value)
  return value.to_dict() if hasattr(value, 'to_dict') else value


def import_config_file(path: str | pathlib.Path) -> types.ModuleType:
  """Imports a `configs/*.py` file by path (configs/ is not a package)."""
  path = pathlib.Path(path).resolve()
  if not path.is_file():
    raise ConfigError(f'no config file {str(path)!r}')
  name = f'_graft_config_{path.stem}_{abs(hash(str(path)))}'
  if name in sys.modules:
    return sys.modules[name]
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None or spec.loader is None:
    raise ConfigError(f'cannot import config file {str(path)!r}')
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  try:
    spec.loader.exec_module(module)
  except BaseException:
    del sys.modules[name]  # a failed import must not be cached as a module
    raise
  return module


def load_config(spec: str) -> Any:
  """Loads 'path/to/config.py[:arg]' the way `config_flags` does.

  A value the config file rejects (e.g. an unknown preset) is a
  ``ConfigError`` that names the spec.
  """
  path, _, arg = spec.partition(':')
  module = import_config_file(path)
  try:
    return module.get_config(arg) if arg else module.get_config()
  except ConfigError:
    raise
  except ValueError as e:
    raise ConfigError(f'{spec}: {e}') from e


def flatten(config_dict, prefix: str = '') -> dict[str, Any]:
  """{dotted field: value} of every leaf of a (nested) ConfigDict or mapping."""
  out = {}
  for key, value in config_dict.items():
    if hasattr(value, 'items'):
      out.update(flatten(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = value
  return out


def leaf_fields(config_dict, prefix: str = '') -> list[str]:
  """Dotted names of every leaf field of a (nested) ConfigDict or mapping."""
  return list(flatten(config_dict, prefix))


def set_field(config_dict, field: str, value: Any) -> None:
  """Sets dotted ``field`` (``'graft.delta'``) of a nested ConfigDict; a preset's edit."""
  *parents, leaf = field.split('.')
  node = config_dict
  for p in parents:
    node = node[p]
  node[leaf] = value


def parse_value(text: str, current: Any) -> Any:
  """A command-line value for a field that now holds ``current``.

  Strings stay as typed; booleans accept true/false in any case; tuples
  accept ``a,b`` as well as Python literals; everything else is a Python
  literal (``3e-4``, ``32``), or the text itself when it is not one.
  """
  if isinstance(current, str):
    return text
  if isinstance(current, bool) and text.lower() in ('true', 'false'):
    return text.lower() == 'true'
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    value = text
  if isinstance(current, tuple) and isinstance(value, (str, int, float)):
    # An empty tuple says nothing of its entries' type: each is read as a literal.
    value = tuple(parse_value(t.strip(), current[0] if current else None)
                  for t in text.split(',') if t.strip())
  if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
    value = float(value)
  return value


def apply_overrides(config_dict, overrides, *, flag: str = '') -> None:
  """Applies 'dotted.field=value' strings to a ConfigDict, as `--config.dotted.field=value` does.

  Values are read by ``parse_value``. An unknown field (with the closest
  known one suggested) or a wrong type raises ``ConfigError`` naming the
  override, as ``<flag><item>`` when ``flag`` (e.g. ``'--config.'``) is given.
  """
  for item in overrides:
    label = f'{flag}{item}' if flag else f'override {item!r}'
    key, sep, text = item.partition('=')
    if not sep or not key:
      raise ConfigError(f'{label} must look like {flag}field.name=value')
    *parents, leaf = key.split('.')
    node = config_dict
    for i, p in enumerate(parents):
      if hasattr(node, 'items') and isinstance(node.get(p), tuple):
        whole = '.'.join(parents[:i + 1])
        raise ConfigError(f'{label}: {whole!r} is a list; set it whole '
                          f'({flag}{whole}="[...]", a Python literal)', field=whole)
      node = node.get(p) if hasattr(node, 'items') else None
    if not hasattr(node, 'items') or leaf not in node:
      hint = did_you_mean(key, leaf_fields(config_dict))
      raise ConfigError(f'{label}: no config field {key!r}{hint}', field=key)
    if hasattr(node[leaf], 'items'):
      raise ConfigError(f'{label}: {key!r} is a group of fields; set one of them, '
                        f'e.g. {flag}{leaf_fields(node[leaf], f"{key}.")[0]}=...', field=key)
    current = node[leaf]
    try:
      node[leaf] = parse_value(text, current)
    except TypeError as e:
      raise ConfigError(f'{label}: {key} must be {type(current).__name__}, got {text!r}',
                        field=key) from e
