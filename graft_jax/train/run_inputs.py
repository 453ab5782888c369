"""What a run reads, checked and counted: the workdir, the training problems, their golds, prompt lengths.

Everything except prompt lengths is checked before any model loads. Problems
set aside are counted by reason; the counts are logged and written into every
metrics row as ``data/...`` (``data/skipped/<field>``, ``data/too_long``,
``data/gold_quarantined/<reason>``).
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import pathlib

from graft_jax import data
from graft_jax.data.rows import DataError
from graft_jax.outputs import storage

log = logging.getLogger(__name__)
_TOKENIZE_BATCH = 1024
_GOLD_REASONS = {"unparseable": "does not parse", "timeout": "cannot be compared within the timeout",
                 "verifier_error": "makes the verifier fail", "not_self_equal": "does not equal itself"}


def source_of(cfg) -> str:
  """What to name in a message about the training problems: their file, or the synthetic set."""
  return "data.synthetic" if cfg.data.source == "synthetic" else cfg.data.train_path


def check_workdir(cfg) -> None:
  """Writes, syncs and removes a probe file in the workdir, so a read-only or full disk
  stops the run before a model loads."""
  workdir = pathlib.Path(cfg.workdir)
  # Named by host and pid: processes of a multi-node run share the workdir.
  probe = workdir / f".write-probe-{socket.gethostname()}-{os.getpid()}"
  try:
    workdir.mkdir(parents=True, exist_ok=True)
    with open(probe, "wb") as f:
      f.write(b"\0")
      f.flush()
      os.fsync(f.fileno())
  except OSError as e:
    raise storage.as_storage_error(e, workdir) or e
  finally:
    probe.unlink(missing_ok=True)


def load_training_problems(cfg) -> tuple[list, dict]:
  """``(problems, counts)``: the config's training problems and what loading them dropped.

  Raises:
    DataError: a malformed row (unless ``data.skip_malformed``), or a file
      with no usable row, naming the file.
  """
  if cfg.data.source == "synthetic":
    s = cfg.data.synthetic
    problems = data.make_synthetic(list(s.families), s.num, seed=s.seed, difficulty=s.difficulty)
    return problems, {"rows": len(problems), "loaded": len(problems)}
  path = cfg.data.train_path
  problems, stats = data.load_problems(path, skip_malformed=cfg.data.skip_malformed)
  counts = {"rows": stats.rows, "loaded": stats.loaded}
  counts.update({f"skipped/{reason.strip('<>')}": n for reason, n in stats.skipped.items()})
  log.info("%s: %d problems from %d rows%s", path, stats.loaded, stats.rows,
           f", skipped by reason {stats.skipped}" if stats.skipped else "")
  if not problems:
    what = ("the file is empty" if not stats.rows else
            f"all {stats.rows} rows were skipped (by reason: {stats.skipped})")
    raise DataError(path, "file", "<rows>", f"no training problems: {what}")
  return problems, counts


def quarantine_golds(problems, *, pool, timeout_s: float, source: str) -> tuple[list, dict]:
  """Sets aside problems whose gold math-verify cannot parse, or cannot compare within
  ``timeout_s`` (``graft_jax.rewards.check_golds``); logs their ids by reason."""
  from graft_jax import rewards  # pylint: disable=import-outside-toplevel
  reasons = rewards.check_golds([p.answer for p in problems], timeout_s=timeout_s, pool=pool)
  by_reason = collections.defaultdict(list)
  for p, reason in zip(problems, reasons):
    if reason:
      by_reason[reason].append(p.id)
  for reason, ids in by_reason.items():
    log.warning("%s: quarantined %d problem(s) whose gold answer %s in math-verify "
                "(reward.timeout_s=%g); ids: %s", source, len(ids),
                _GOLD_REASONS.get(reason, reason), timeout_s, ", ".join(ids))
  kept = [p for p, reason in zip(problems, reasons) if not reason]
  return kept, {f"gold_quarantined/{r}": len(ids) for r, ids in by_reason.items()}


def prompt_lengths(tokenizer, texts) -> list[int]:
  """Token counts of ``texts`` without special tokens, as the policy tokenizes prompts."""
  out = []
  for i in range(0, len(texts), _TOKENIZE_BATCH):
    ids = tokenizer(texts[i:i + _TOKENIZE_BATCH], add_special_tokens=False)["input_ids"]
    out += [len(x) for x in ids]
  return out


def drop_too_long(problems, policies: dict, *, max_len: int, mode: str, source: str,
                  what: str = "training problems") -> tuple[list, int]:
  """``(kept, number dropped)``: problems whose prompt (problem + suffix) fits ``max_len``
  tokens in every policy's tokenizer.

  Raises:
    DataError: with ``mode == 'error'``, naming the first prompt that is too long.
  """
  worst = [0] * len(problems)
  worst_name = [""] * len(problems)
  for name, policy in policies.items():
    texts = [p.problem + policy.prompt_suffix for p in problems]
    for i, n in enumerate(prompt_lengths(policy.tokenizer, texts)):
      if n > worst[i]:
        worst[i], worst_name[i] = n, name
  long = [i for i, n in enumerate(worst) if n > max_len]
  if long and mode == "error":
    i = long[0]
    raise DataError(source, f"problem {problems[i].id}", "problem",
                    f"the prompt is {worst[i]} tokens for {worst_name[i]} (problem + prompt "
                    f"suffix), over max_prompt_len={max_len} ({len(long)} of the {len(problems)} "
                    f"{what} exceed it); set data.too_long=skip to skip them")
  if long:
    log.warning("%s: skipped %d of %d %s whose prompt is over max_prompt_len=%d tokens "
                "(longest %d)", source, len(long), len(problems), what, max_len,
                max(worst[i] for i in long))
  dropped = set(long)
  return [p for i, p in enumerate(problems) if i not in dropped], len(long)


def require_batch(problems, cfg, counts: dict) -> None:
  """Raises DataError unless enough problems are left for one step's prompts."""
  if len(problems) < cfg.prompts_per_step:
    aside = {k: v for k, v in counts.items() if k not in ("rows", "loaded")}
    raise DataError(source_of(cfg), "file", "<rows>",
                    f"{len(problems)} usable training problems (set aside: {aside or 'none'}) "
                    f"cannot fill one step of prompts_per_step={cfg.prompts_per_step}")
