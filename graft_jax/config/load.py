"""ConfigDict -> typed dataclasses (key and type checks), config files and overrides.

Config files under configs/ are imported by path: configs/ is not a package.
Loading ``path.py[:arg]`` and reading ``field=value`` overrides is
``ml_collections.config_flags``' own work (the launchers' ``--config`` flags,
``graft_jax.cli``); this module runs it outside a command line and turns its
errors into one ``ConfigError`` that names the override and the closest field.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import os
import pathlib
import sys
import types
import typing
import warnings
from typing import Any, Iterable, Mapping

from absl import flags
from ml_collections.config_flags import config_flags, tuple_parser

from graft_jax.config.errors import ConfigError, did_you_mean


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
  """Loads 'path/to/config.py[:arg]' as a ``--config`` flag would (config_flags), unlocked.

  A missing file, or a value the config file rejects (e.g. an unknown
  preset), is a ``ConfigError`` that names the spec.
  """
  path = spec.partition(':')[0]
  if not os.path.isfile(path):  # config_flags would defer this error to the config's first use
    raise ConfigError(f'no config file {os.path.abspath(path)!r}')
  values = flags.FlagValues()
  try:  # the default is parsed, and the file loaded, at definition
    with quiet_loader():
      config_flags.DEFINE_config_file('config', spec, flag_values=values, lock_config=False,
                                      sys_argv=['load_config'])
  except flags.IllegalFlagValueError as e:
    raise _file_error(spec, e) from None
  return values['config'].value


@contextlib.contextmanager
def quiet_loader():
  """Hides the DeprecationWarning of the importlib call config_flags loads a config file with."""
  with warnings.catch_warnings():
    warnings.filterwarnings('ignore', message='the load_module', category=DeprecationWarning)
    yield


def _file_error(spec: str, error: BaseException) -> BaseException:
  """The config file's own error, which config_flags re-raises with its traceback as text."""
  while error.__context__ is not None:
    error = error.__context__
  if isinstance(error, ConfigError):
    return error
  if isinstance(error, ValueError):
    return ConfigError(f'{spec}: {error}')
  return error  # a bug in the file: its traceback shows


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


class _TupleParser(tuple_parser.TupleParser):
  """config_flags' tuple parser (a Python literal such as ``(0, 1)``, or one entry per
  repeated flag) that also reads bare words ``a,b`` as ``('a', 'b')``, where it would
  give the one string ``('a,b',)``; ``"'a,b'"`` stays one string."""

  def parse(self, argument):
    if isinstance(argument, str) and ',' in argument and not _is_literal(argument):
      parse = super().parse
      return tuple(v for part in argument.split(',') if part.strip() for v in parse(part.strip()))
    return super().parse(argument)


def _is_literal(text: str) -> bool:
  try:
    ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return False
  return True


# Every --config flag (graft_jax.cli) and every apply_overrides call parses tuples this way.
config_flags.register_flag_parser_for_type(tuple, _TupleParser())


def check_field(config_dict, field: str, label: str, flag: str = '--config.') -> None:
  """Raises ``ConfigError`` (``label: ...``) unless dotted ``field`` is one value of
  ``config_dict``: an unknown field names the closest known one; a list (``models``) is
  set whole and a group of fields one field at a time."""
  *parents, leaf = field.split('.')
  node = config_dict
  for i, p in enumerate(parents):
    if hasattr(node, 'items') and isinstance(node.get(p), tuple):
      whole = '.'.join(parents[:i + 1])
      raise ConfigError(f'{label}: {whole!r} is a list; set it whole '
                        f'({flag}{whole}="[...]", a Python literal)', field=whole)
    node = node.get(p) if hasattr(node, 'items') else None
  if not hasattr(node, 'items') or leaf not in node:
    hint = did_you_mean(field, leaf_fields(config_dict))
    raise ConfigError(f'{label}: no config field {field!r}{hint}', field=field)
  if hasattr(node[leaf], 'items'):
    raise ConfigError(f'{label}: {field!r} is a group of fields; set one of them, '
                      f'e.g. {flag}{leaf_fields(node[leaf], f"{field}.")[0]}=...', field=field)


def apply_overrides(config_dict, overrides: Iterable[str] | Mapping[str, Any], *,
                    flag: str = '') -> None:
  """Applies 'dotted.field=value' strings to a ConfigDict, as `--config.dotted.field=value` does.

  Each value is read by config_flags, exactly as the flag would be: strings as
  typed, ``true``/``false``, ints for floats, tuples as a literal or ``a,b``.
  ``overrides`` may instead map fields to values read already (config_flags'
  ``override_values``). An unknown field (with the closest known one suggested)
  or a value of the wrong type raises ``ConfigError`` naming the override, as
  ``<flag><item>`` when ``flag`` (e.g. ``'--config.'``) is given.
  """
  if isinstance(overrides, Mapping):
    for field in overrides:
      check_field(config_dict, field, f'{flag}{field}', flag)
    config_dict.update_from_flattened_dict(dict(overrides))
    return
  for item in overrides:
    label = f'{flag}{item}' if flag else f'override {item!r}'
    field, sep, text = item.partition('=')
    if not sep or not field:
      raise ConfigError(f'{label} must look like {flag}field.name=value')
    check_field(config_dict, field, label, flag)
    argv = ['apply_overrides', f'--config.{field}={text}']
    values = flags.FlagValues()  # a fresh flag per item: an error is this item's
    config_flags.DEFINE_config_dict('config', config_dict, flag_values=values, lock_config=False,
                                    sys_argv=argv)
    try:
      values(argv)
    except flags.IllegalFlagValueError as e:
      current = type(flatten(config_dict)[field]).__name__
      raise ConfigError(f'{label}: {field} must be {current}, got {text!r}', field=field) from e
