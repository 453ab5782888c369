"""Launcher plumbing: the ``--config`` flags, quiet logs, and one-line errors.

A launcher hands its main to ``run`` (absl flags plus ``--config=file.py[:presets]``
and ``--config.<field>=<value>``, ml_collections' ``config_flags``) or to ``guard``
(any main). A project error (a bad config value, a missing path, a malformed
data row, an unreadable checkpoint or model, a vLLM fault) prints one line
naming the field, file or line and exits non-zero: 2 when the command line or
config is wrong and nothing ran, 1 when the run stopped. A run stopped by a
signal after saving (``graft_jax.preemption.Stopped``) prints its one
line and exits 75 (``STOPPED_EXIT``, sysexits' EX_TEMPFAIL): the same command
resumes.
``--verbose`` (or ``GRAFT_VERBOSE=1``) shows the traceback instead, and
third-party INFO logs.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from typing import Any, Callable, Mapping, NoReturn

import ml_collections
from absl import flags
from ml_collections import config_flags

from graft_jax import distributed
from graft_jax.config import load as config_load
from graft_jax import preemption
from graft_jax.outputs import progress

VERBOSE_ENV = "GRAFT_VERBOSE"
USAGE_EXIT = 2  # the command line or the config is wrong; nothing ran
ERROR_EXIT = 1  # the run stopped on bad input or a fault
STOPPED_EXIT = 75  # stopped by SIGTERM / SIGINT / SIGUSR1 after saving; rerun to resume
_USAGE_LABELS = ("usage error", "config error", "path error", "workdir busy error",
                 "workdir in use error", "preflight error")  # nothing ran


class UsageError(ValueError):
  """A command line that cannot be parsed: an unknown flag, a bad value, a stray argument."""


def is_verbose(argv=None) -> bool:
  argv = sys.argv if argv is None else argv
  return os.environ.get(VERBOSE_ENV, "") not in ("", "0") or any(
      a in ("--verbose", "--verbose=true", "--verbose=True") for a in argv[1:])


def setup_logging(verbose: bool = False) -> None:
  """Our INFO lines (counts of loaded and dropped rows, resumes, validation) print above
  the progress bar; third-party INFO logs and Python warnings print only when ``verbose``."""
  handler = progress.TqdmHandler()
  handler.setFormatter(_Formatter())
  if not verbose:
    handler.addFilter(_ours_or_warnings)
    # "An NVIDIA GPU may be present ... falling back to cpu" on every CPU start.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    from absl import logging as absl_logging  # orbax logs through absl
    absl_logging.set_verbosity(absl_logging.WARNING)
  root = logging.getLogger()
  root.handlers[:] = [handler]
  root.setLevel(logging.INFO)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _ours_or_warnings(record: logging.LogRecord) -> bool:
  return record.levelno >= logging.WARNING or record.pathname.startswith(_PACKAGE_DIR)


class _Formatter(logging.Formatter):
  def format(self, record: logging.LogRecord) -> str:
    text = record.getMessage()
    return text if record.levelno <= logging.INFO else f"{record.levelname.lower()}: {text}"


_PATH_ERRORS = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
                PermissionError)


def is_project_error(exc: BaseException) -> bool:
  """Errors that explain themselves: the project's own types, missing or unusable paths,
  bad flags. Anything else is a bug and keeps its traceback."""
  return (isinstance(exc, (_PATH_ERRORS, flags.Error))
          or any(c.__module__.startswith("graft_jax") for c in type(exc).__mro__))


def label(exc: BaseException) -> str:
  """``config error``, ``path error``, ``data error``, ``model load error``, ... for ``exc``."""
  if isinstance(exc, flags.Error):
    return "usage error"
  for cls in type(exc).__mro__:
    module = cls.__module__
    if module.startswith("graft_jax.models"):
      return "model load error"
    if module.startswith("graft_jax.rollout.vllm"):
      return "vLLM error"
    if module.startswith("graft_jax"):
      words = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__.removesuffix("Error")).lower()
      return f"{words} error"
  return "path error" if isinstance(exc, _PATH_ERRORS) else "error"


def one_line(exc: BaseException, sources: Mapping[str, str] | None = None) -> str:
  """``<label>: <message>`` on one line; names the flag that set the blamed field
  (``sources``: field -> flag text) and, for a run that stopped, how to see more.
  An error that gathers independent faults (``exc.failures``, e.g. the start-up
  preflight's) gets one such line per fault."""
  lines = [_labelled(label(exc), fault, sources)
           for fault in getattr(exc, "failures", None) or [exc]]
  if exit_code(exc) == ERROR_EXIT:
    lines[-1] += f" [--verbose or {VERBOSE_ENV}=1 for the traceback]"
  return "\n".join(lines)


def _labelled(name: str, exc: BaseException, sources: Mapping[str, str] | None) -> str:
  text = ""
  for part in (line.strip() for line in str(exc).splitlines() if line.strip()):
    text += ("" if not text else " " if text.endswith(":") else "; ") + part
  line = f"{name}: {text or type(exc).__name__}"
  field = getattr(exc, "field", None)
  # A path error quotes the path; an override error quotes its flag.
  if sources and field in sources and not isinstance(exc, OSError) and sources[field] not in line:
    line += f" (from {sources[field]})"
  return line


def exit_code(exc: BaseException) -> int:
  return USAGE_EXIT if label(exc) in _USAGE_LABELS else ERROR_EXIT


def guard(main: Callable[..., Any], *args, sources: Mapping[str, str] | None = None) -> NoReturn:
  """Runs ``main(*args)`` and exits: a project error becomes one line on stderr.

  ``--verbose`` is taken out of ``sys.argv`` first, so an argparse main never sees it.
  """
  verbose = is_verbose()
  sys.argv[1:] = [a for a in sys.argv[1:] if not a.startswith("--verbose")]
  setup_logging(verbose)
  try:
    code = main(*args)
  except preemption.Stopped as e:
    progress.end_phase()
    if distributed.is_writer():  # one line per run, not per process
      print(e, file=sys.stderr)
    sys.exit(STOPPED_EXIT)
  except KeyboardInterrupt:
    if verbose:
      raise
    print("interrupted", file=sys.stderr)
    sys.exit(130)
  except Exception as e:  # noqa: BLE001  (anything else is a bug: its traceback prints)
    if verbose or not is_project_error(e):
      raise
    progress.end_phase()
    print(one_line(e, sources), file=sys.stderr)
    sys.exit(exit_code(e))
  sys.exit(code or 0)


def run(main: Callable[[Any], Any], *, default_config: str | None,
        config_help: str = "config file and presets, path.py[:preset,...]") -> NoReturn:
  """Parses absl flags and the config (``parse_flags``), then runs ``main(config_dict)``
  under ``guard``; ``default_config=None`` makes ``--config`` required."""
  main_module = sys.argv[0]  # listed with the launcher's own flags by --help
  flags.DEFINE_bool("verbose", False, f"tracebacks and third-party INFO logs (or {VERBOSE_ENV}=1)",
                    module_name=main_module)
  sources: dict[str, str] = {}

  def body():
    config_dict, set_by = parse_flags(sys.argv, default_config, config_help=config_help,
                                      module_name=main_module)
    sources.update(set_by)
    return main(config_dict)

  from absl import app
  app.define_help_flags()  # --help, --helpfull
  guard(body, sources=sources)


def parse_flags(argv: list[str], default_config: str | None, *,
                config_help: str = "config file and presets, path.py[:preset,...]",
                flag_values: flags.FlagValues = flags.FLAGS,
                module_name: str | None = None) -> tuple[Any, dict[str, str]]:
  """``(config_dict, sources)``: ``argv`` parsed by absl into ``flag_values``, with ``--config``
  an ``ml_collections.config_flags`` config file.

  ``--config=path.py[:arg]`` picks the file (default ``default_config``);
  ``--config.<field>=<value>`` (or ``--config.<field> <value>``) sets one field,
  read by config_flags by the field's type (docs/configs.md). ``sources`` maps each
  field set to its flag, for ``one_line``. A mistake raises ``UsageError``, or
  ``ConfigError`` naming the flag and, for an unknown field, the closest known one.
  """
  help_text = f"{config_help}; set one field with --config.<field>=<value>"
  try:
    with config_load.quiet_loader():  # the default loads at definition, unless argv names one
      config_flags.DEFINE_config_file("config", default_config, help_text,
                                      flag_values=flag_values, sys_argv=argv)
      if module_name:
        flag_values.register_flag_by_module(module_name, flag_values["config"])
      positional = flag_values(argv)
  except Exception as e:  # noqa: BLE001  (config_flags' errors name neither flag nor field)
    _raise_config_error(e, argv, default_config)
    if isinstance(e, flags.Error):
      raise UsageError(str(e)) from e
    raise
  if positional[1:]:
    raise UsageError(f"unexpected argument {positional[1]!r} (flags look like --name=value)")
  config_dict = flag_values["config"].value
  if config_dict is None:
    raise UsageError("--config=path.py[:arg] is required")
  if not isinstance(config_dict, ml_collections.ConfigDict):  # a load error, deferred till now
    config_dict = config_load.load_config(config_flags.get_config_filename(flag_values["config"]))
  set_by = config_flags.get_override_values(flag_values["config"])
  for field in set_by:  # config_flags takes a group as a dict; we take one field at a time
    config_load.check_field(config_dict, field, f"--config.{field}")
  return config_dict, {field: f"--config.{field}={value}" for field, value in set_by.items()}


def overrides(flag_values: flags.FlagValues = flags.FLAGS) -> dict[str, Any]:
  """``{field: value}`` of the parsed ``--config.<field>`` flags, for configs other than
  ``--config``'s own (``config_load.apply_overrides`` takes it)."""
  return dict(config_flags.get_override_values(flag_values["config"]))


def _raise_config_error(error: Exception, argv: list[str], default_config: str | None) -> None:
  """Raises the ``ConfigError`` that names the flag behind a failed parse, if one is.

  The config file is loaded again (a missing file or a rejected preset raises
  here), each ``--config.<field>`` flag's field checked, and a value absl
  rejected read again by ``config_load.apply_overrides``, whose message names
  the field's type.
  """
  spec, named = _config_flags_in(argv, default_config)
  if not spec:
    return
  config_dict = config_load.load_config(spec)
  for field, flag in named.items():
    config_load.check_field(config_dict, field, flag)
  text, cause = str(error), f": {error.__context__}"
  if (isinstance(error, flags.IllegalFlagValueError) and text.startswith("flag --config.")
      and text.endswith(cause)):  # absl's "flag --config.<field>=<value>: <parser's error>"
    config_load.apply_overrides(config_dict, [text[len("flag --config."):-len(cause)]],
                                flag="--config.")


def _config_flags_in(argv: list[str], spec: str | None) -> tuple[str | None, dict[str, str]]:
  """(``--config``'s value, ``{field: flag as typed}``) by config_flags' own patterns: its
  errors do not say which flag failed."""
  named = {}
  for i, arg in enumerate(argv[1:], 1):
    if re.match(r"--?config(=|$)", arg):
      spec = arg.partition("=")[2] if "=" in arg else next(iter(argv[i + 1:i + 2]), None)
    elif match := re.match(r"--?(no)?config\.([^=]+)", arg):
      named[match[2]] = arg
  return spec, named
