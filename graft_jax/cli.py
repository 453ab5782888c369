"""Launcher plumbing: the ``--config`` flags, quiet logs, and one-line errors.

A launcher hands its main to ``run`` (absl flags plus ``--config=file.py[:presets]``
and ``--config.<field>=<value>``) or to ``guard`` (any main). A project error
(a bad config value, a missing path, a malformed data row, an unreadable
checkpoint or model, a vLLM fault) prints one line naming the field, file or
line and exits non-zero: 2 when the command line or config is wrong and
nothing ran, 1 when the run stopped. A run stopped by a signal after saving
(``graft_jax.train.preemption.Stopped``) prints its one line and exits 75
(``STOPPED_EXIT``, sysexits' EX_TEMPFAIL): the same command resumes.
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

from absl import flags

from graft_jax import distributed
from graft_jax.train import preemption
from graft_jax.outputs import progress

VERBOSE_ENV = "GRAFT_VERBOSE"
USAGE_EXIT = 2  # the command line or the config is wrong; nothing ran
ERROR_EXIT = 1  # the run stopped on bad input or a fault
STOPPED_EXIT = 75  # stopped by SIGTERM / SIGINT / SIGUSR1 after saving; rerun to resume
_USAGE_LABELS = ("usage error", "config error", "path error",
                 "workdir busy error")  # nothing ran


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
  (``sources``: field -> flag text) and, for a run that stopped, how to see more."""
  text = ""
  for part in (line.strip() for line in str(exc).splitlines() if line.strip()):
    text += ("" if not text else " " if text.endswith(":") else "; ") + part
  line = f"{label(exc)}: {text or type(exc).__name__}"
  field = getattr(exc, "field", None)
  # A path error quotes the path; an override error quotes its flag.
  if sources and field in sources and not isinstance(exc, OSError) and sources[field] not in line:
    line += f" (from {sources[field]})"
  if exit_code(exc) == ERROR_EXIT:
    line += f" [--verbose or {VERBOSE_ENV}=1 for the traceback]"
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


def split_config_flags(args: list[str], name: str = "config") -> tuple[list[str], list[str]]:
  """``(['optimizer.lr=3e-4', ...], other args)``: the ``--config.<field>=<value>`` flags
  (also ``--config.<field> <value>``) apart from the rest, which absl parses."""
  overrides, rest, i = [], [], 0
  prefix = f"--{name}."
  while i < len(args):
    arg = args[i]
    if arg.startswith(prefix):
      item = arg[len(prefix):]
      if "=" not in item:
        if i + 1 >= len(args) or args[i + 1].startswith("--"):
          raise UsageError(f"{arg} needs a value: {arg}=VALUE")
        i += 1
        item = f"{item}={args[i]}"
      overrides.append(item)
    else:
      rest.append(arg)
    i += 1
  return overrides, rest


def run(main: Callable[[Any], Any], *, default_config: str,
        config_help: str = "config file and presets, path.py[:preset,...]") -> NoReturn:
  """Parses absl flags and the config, then runs ``main(config_dict)`` under ``guard``.

  ``--config=path.py[:arg]`` picks the file (default ``default_config``);
  ``--config.<field>=<value>`` sets one field (values as in
  ``graft_jax.config.load.parse_value``). Unknown fields name the
  closest known one.
  """
  from graft_jax.config import load as config_load

  main_module = sys.argv[0]  # listed with the launcher's own flags by --help
  flags.DEFINE_string("config", default_config,
                      f"{config_help}; set one field with --config.<field>=<value>",
                      module_name=main_module)
  flags.DEFINE_bool("verbose", False, f"tracebacks and third-party INFO logs (or {VERBOSE_ENV}=1)",
                    module_name=main_module)
  sources: dict[str, str] = {}

  def body():
    overrides, rest = split_config_flags(sys.argv[1:])
    try:
      positional = flags.FLAGS(sys.argv[:1] + rest)
    except flags.Error as e:
      raise UsageError(str(e)) from e
    if positional[1:]:
      raise UsageError(f"unexpected argument {positional[1]!r} (flags look like --name=value)")
    config_dict = config_load.load_config(flags.FLAGS.config)
    sources.update({item.partition("=")[0]: f"--config.{item}" for item in overrides})
    config_load.apply_overrides(config_dict, overrides, flag="--config.")
    return main(config_dict)

  from absl import app
  app.define_help_flags()  # --help, --helpfull
  guard(body, sources=sources)

