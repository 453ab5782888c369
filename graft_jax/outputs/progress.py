"""What a run shows on the console: the step bar, the slow phase under way, and the closing summary.

The bar counts completed steps and shows, per model, the step's mean reward,
its grafted groups and its admitted / offered peer responses, and the last
validation pass@1. ``phase(text)`` says what a slow phase is doing (compiling,
validating, building the toy pair): on the bar while one is open, otherwise
as a console line. Log records go through ``tqdm.write`` so they never break
the bar.

When several runs write to one terminal or log (the toy job's workers),
``shared_output(name)`` turns this process's bar, phases and log records into
whole lines prefixed with the run's name, each one ``write(2)``: the runs' lines
alternate but never break into each other, and a redirected log reads top to bottom.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import sys
import time
from typing import Any, Mapping

import tqdm

from graft_jax import distributed

log = logging.getLogger(__name__)
_active: list[ProgressBar] = []  # the open bar, if any
_last_line = {"time": 0.0, "text": None}
_shared = {"name": None}  # the run's name while its output is shared (`shared_output`)


@contextlib.contextmanager
def shared_output(name: str):
  """While entered, this process's progress and log records are whole lines ``[name] ...``."""
  before = _shared["name"]
  _shared["name"] = name
  try:
    yield
  finally:
    _shared["name"] = before


def write_lines(text: str) -> None:
  """``text`` to stderr, each line prefixed with the run's name, in one ``write(2)``: a
  pipe or file shared with other processes gets it whole (a pipe takes up to PIPE_BUF,
  4 KiB, at once; a longer record may still meet another's)."""
  prefix = f"[{_shared['name']}] "
  data = "".join(f"{prefix}{line}\n" for line in text.splitlines() or [""]).encode()
  sys.stderr.flush()  # whatever Python holds goes first, in order
  try:
    fd = sys.stderr.fileno()
  except (AttributeError, OSError, ValueError):  # a stream in memory (pytest's capsys)
    sys.stderr.write(data.decode())
    return
  while data:
    data = data[os.write(fd, data):]


class ProgressBar:
  """A tqdm bar of completed steps with a per-model headline.

  Args:
    total: steps of the run.
    initial: steps already done (a resumed run).
  """

  def __init__(self, total: int | None, initial: int = 0, *, file=None):
    end_phase()
    self._total = total
    # Shared output: a line per step instead of a bar redrawn in place.
    self._bar = None if _shared["name"] else tqdm.tqdm(
        total=total, initial=initial, unit="step", dynamic_ncols=True, file=file,
        desc="training")
    self._val: dict[str, float] = {}
    _active.append(self)

  def update(self, step: int, record: Mapping[str, Any]) -> None:
    """Step ``step`` (0-based) is done; ``record`` is its flattened metrics."""
    for name in models_of(record):
      value = record.get(f"{name}/eval/average")
      if isinstance(value, (int, float)):
        self._val[name] = value
    if self._bar is None:
      of = f"/{self._total}" if self._total else ""
      write_lines(f"step {step + 1}{of}: {headline(record, self._val)}")
      return
    self._bar.n = step + 1
    self._bar.set_description_str("training", refresh=False)
    self._bar.set_postfix_str(headline(record, self._val), refresh=False)
    self._bar.refresh()

  def phase(self, text: str) -> None:
    if self._bar is None:
      _throttled(text)
    else:
      self._bar.set_description_str(text, refresh=True)

  def close(self) -> None:
    if self in _active:
      _active.remove(self)
    if self._bar is not None:
      self._bar.close()


def models_of(record: Mapping[str, Any]) -> list[str]:
  """Model names of a flattened step record (each has ``<name>/reward_mean``)."""
  return [k[:-len("/reward_mean")] for k in record
          if k.endswith("/reward_mean") and k.count("/") == 1]


def headline(record: Mapping[str, Any], val: Mapping[str, float] | None = None) -> str:
  """``toy_a: reward 0.31 grafted 2 admitted 5/8 val 0.42 | toy_b: ...``.

  ``val`` holds each model's last validation pass@1.
  """
  val = val or {}
  parts = []
  for name in models_of(record):
    ex = f"{name}/exchange/"
    text = f"{name}: reward {_num(record[f'{name}/reward_mean'])}"
    if f"{ex}grafted_groups" in record:
      text += f" grafted {record[f'{ex}grafted_groups']}"
    if f"{ex}admitted" in record and f"{ex}peer_offered" in record:
      text += f" admitted {record[f'{ex}admitted']}/{record[f'{ex}peer_offered']}"
    if name in val:
      text += f" val {_num(val[name])}"
    parts.append(text)
  return " | ".join(parts)


def _num(value: Any) -> str:
  return f"{value:.3g}" if isinstance(value, float) else str(value)


def phase(text: str, *, every_s: float = 10.0) -> None:
  """Shows what a slow phase is doing now, e.g. ``"compiling the update (first step only)…"``.

  On the open bar if there is one; otherwise rewritten in place on a
  terminal's stderr, or elsewhere (files, CI) logged at INFO at most every
  ``every_s`` seconds, so a loop may call it as often as it likes. Only process 0 of a
  multi-process run shows it.
  """
  if not distributed.is_writer():
    return
  if _active:
    _active[-1].phase(text)
    return
  if sys.stderr.isatty() and not _shared["name"]:
    sys.stderr.write(f"\r\x1b[K{text}")
    sys.stderr.flush()
    _last_line["text"] = text
    return
  _throttled(text, every_s)


def _throttled(text: str, every_s: float = 10.0) -> None:
  """Logs ``text`` at INFO at most every ``every_s`` seconds."""
  now = time.monotonic()
  if now - _last_line["time"] >= every_s:
    _last_line["time"] = now
    log.info("%s", text)


def end_phase() -> None:
  """Ends a terminal line that ``phase`` was rewriting (the next output starts afresh)."""
  if _last_line["text"] is not None:
    sys.stderr.write("\n")
    sys.stderr.flush()
  _last_line.update(text=None, time=0.0)


class TqdmHandler(logging.Handler):
  """A logging handler that prints above an open progress bar instead of through it."""

  def emit(self, record: logging.LogRecord) -> None:
    try:
      if _shared["name"]:
        write_lines(self.format(record))
        return
      end_phase()
      tqdm.tqdm.write(self.format(record), file=sys.stderr)
    except Exception:  # noqa: BLE001  (logging must never raise)
      self.handleError(record)


def summary(*, workdir: str, steps: int, method: str, seconds: float,
            history: Mapping[str, list], outputs: list[tuple[str, str]]) -> str:
  """The lines a run ends with: validation pass@1 per model, then what it wrote.

  Args:
    history: ``{model: [(step, average pass@1), ...]}`` (0-based steps), as
      ``Validator.history``.
    outputs: ``(path, what it is)`` for each thing the run wrote.
  """
  lines = [f"done: {method}, {steps} steps in {workdir} ({seconds:.0f} s)"]
  if any(history.values()):
    lines.append("validation pass@1 (average over the suite):")
    for name, h in history.items():
      if not h:
        continue
      last_step, last = h[-1]
      best_step, best = max(h, key=lambda x: (x[1], -x[0]))
      lines.append(f"  {name}: final {last:.4f} (after step {last_step + 1}), "
                   f"best {best:.4f} (after step {best_step + 1})")
  lines.append("wrote:")
  width = max((len(p) for p, _ in outputs), default=0)
  lines += [f"  {p:<{width}}  {what}" for p, what in outputs]
  return "\n".join(lines)


def run_outputs(cfg) -> list[tuple[str, str]]:
  """``(path, what)`` for everything a training run with ``cfg`` writes."""
  work = pathlib.Path(cfg.workdir)
  out = [(str(work / "metrics.jsonl"),
          "per-step metrics and validation (pandas.read_json(path, lines=True))")]
  if cfg.logging.tensorboard:
    out.append((str(work / "tensorboard"), f"tensorboard --logdir {work / 'tensorboard'}"))
  if cfg.logging.wandb:
    mode = cfg.logging.wandb_mode
    sync = "; wandb sync <folder>/offline-run-*" if mode == "offline" else ""
    out.append((str(work / "wandb"), f"the W&B run's files ({mode}{sync})"))
  if cfg.logging.peer_log:
    out.append((cfg.peer_log_dir, "every rollout, <model>/step_*.parquet (pandas.read_parquet)"))
  out.append((cfg.checkpoint_dir, "orbax checkpoints; the same command resumes"))
  if cfg.checkpoint.export_hf:
    out.append((str(work / "hf"), "each trained model as a Hugging Face folder "
                "(launch/eval.py --model=<folder>/<model>)"))
  from graft_jax.config.checks import policy_configs
  from graft_jax.models.hub import describe, repo_of
  # A model from the Hub: the commit it trained, as config.json records it.
  hub = [f"{m.name} {describe(m.path, m.revision)}" for m in policy_configs(cfg)
         if repo_of(m.path)]
  out.append((str(work / "config.json"), "the resolved config"
              + (f" (weights: {', '.join(hub)})" if hub else "")))
  if cfg.engine == "vllm":
    out.append((str(work / "vllm"), "each vLLM server's log"))
  return out
