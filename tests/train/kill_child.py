"""A tiny GRAFT run in a process of its own that SIGKILLs itself, or fills its disk, at a chosen point.

  python -m tests.train.kill_child WORKDIR STEPS [[full:|term:]PHASE@STEP[+DELAY_MS] ...]

PHASE is one of ``sampling``, ``update``, ``validation``, ``metrics_write``,
``checkpoint_write``, or ``update_end`` (the first model's update has run its
optimizer steps, which took over the old parameters' buffers, and is about to
set the new ones). At the first entry into PHASE during STEP (0-based) a
timer sends SIGKILL after DELAY_MS (0: at once, before the phase does
anything); ``metrics_write`` with no delay tears the row instead: half the line
reaches the disk, then the process dies. ``full:`` instead sets the file size
limit to 0 there (``ulimit -f 0``): every later write that grows a file fails
with EFBIG inside whichever writer makes it, Python's or tensorstore's, as a
full disk would. ``term:`` sends SIGTERM instead of SIGKILL, which the
trainer answers by saving and stopping (``graft_jax.preemption``); two
``term:`` points in one attempt are a second signal, however close (the
duplicate window is off then). The run is the toy smoke
setting of ``tests/train/tiny_pair`` (two tiny heterogeneous models,
checkpoints every step, validation every 2 steps, one training prompt over
``max_prompt_len``) under the launchers' console (``graft_jax.cli.guard``: one
line per project error), holding the workdir's lock as ``launch/train.py``
does. A finished run writes ``final_params.npz``.
"""

from __future__ import annotations

import os
import resource
import pathlib
import signal
import sys
import threading

import jax
import numpy as np

from graft_jax import cli, preemption
from graft_jax.outputs import metrics_writer as metrics
from graft_jax.outputs import workdir_lock
from graft_jax.outputs import checkpoint
from graft_jax.train import policy, step as step_lib, trainer as trainer_lib
from graft_jax.train.validation import Validator
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

PHASES = ("sampling", "update", "validation", "metrics_write", "checkpoint_write")
UPDATE_END = "update_end"
TOO_LONG = "too-long"
_current = {"step": -1}


def _die() -> None:
  os.kill(os.getpid(), signal.SIGKILL)


def _arm(points: dict, phase: str) -> bool:
  """Kills (now or after the point's delay) if ``phase`` is a kill point of the current step.
  Returns True when the caller should tear its write instead."""
  term_ms = points.pop(("term", phase, _current["step"]), None)
  if term_ms is not None:
    _after(term_ms, lambda: os.kill(os.getpid(), signal.SIGTERM))
  delay_ms = points.pop((phase, _current["step"]), None)
  if points.pop(("full", phase, _current["step"]), None) is not None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
  if delay_ms is None:
    return False
  if phase == "metrics_write" and delay_ms == 0:
    return True
  _after(delay_ms, _die)
  return False


def _after(delay_ms: float, act) -> None:
  if delay_ms == 0:
    act()
  else:
    threading.Timer(delay_ms / 1000, act).start()


def _wrap(owner, attr: str, phase: str, points: dict) -> None:
  original = getattr(owner, attr)

  def wrapped(*args, **kwargs):
    _arm(points, phase)
    return original(*args, **kwargs)

  setattr(owner, attr, wrapped)


def install(points: dict) -> None:
  """Instruments the phases; ``points`` maps (phase, step) -> delay in ms."""
  run_step = trainer_lib.Trainer.run_step

  def counted(self):
    _current["step"] = self.step
    return run_step(self)

  trainer_lib.Trainer.run_step = counted
  _wrap(step_lib, "collect_all", "sampling", points)
  _wrap(step_lib, "run_updates", "update", points)
  _wrap(policy.Policy, "set_params", UPDATE_END, points)
  _wrap(Validator, "run", "validation", points)
  _wrap(checkpoint.Checkpointer, "save", "checkpoint_write", points)
  write = metrics.MetricsWriter.write

  def write_or_tear(self, step, row):
    if _arm(points, "metrics_write"):
      line = metrics.json.dumps({"step": int(step), "torn": "x" * 64}) + "\n"
      with open(self.path, "a", encoding="utf-8") as f:
        f.write(line[:len(line) // 2])
        f.flush()
        os.fsync(f.fileno())
      _die()
    return write(self, step, row)

  metrics.MetricsWriter.write = write_or_tear


def parse_points(args) -> dict:
  points = {}
  for arg in args:
    kind, _, point = arg.rpartition(":")
    phase, _, rest = point.partition("@")
    step, _, delay = rest.partition("+")
    if phase not in PHASES + (UPDATE_END,) or kind not in ("", "full", "term"):
      raise SystemExit(f"unknown fault {arg!r}; expected [full:|term:]PHASE with PHASE one of "
                       f"{PHASES + (UPDATE_END,)}")
    points[(kind, phase, int(step)) if kind else (phase, int(step))] = float(delay or 0)
  return points


def main(argv) -> None:
  workdir, steps = pathlib.Path(argv[1]), int(argv[2])
  signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the size limit: EFBIG, not death
  points = parse_points(argv[3:])
  if sum(key[0] == "term" for key in points) > 1:  # the second is meant, not a copy
    preemption.DUPLICATE_WINDOW_S = 0.0
  install(points)
  cfg = make_cfg("graft", workdir)
  validator = Validator({"say": tiny_pair.problems(8, seed=99)}, every_steps=2, k=2,
                        temperature=1.0, top_p=1.0, seed=cfg.seed,
                        max_new_tokens=cfg.max_response_len,
                        prompt_suffix=cfg.data.prompt_suffix, score_fn=tiny_pair.contains_reward)
  # One prompt over max_prompt_len: skipped before sampling, counted in every row.
  problems = tiny_pair.problems() + [tiny_pair.Problem(TOO_LONG, "Say a. " * 40, "a")]
  with workdir_lock.held(workdir):
    t = trainer_lib.Trainer(cfg, problems, tiny_pair.make_models(),
                            reward_fn=tiny_pair.contains_reward, validator=validator)
    try:
      t.run(steps)
    finally:
      t.close()
  leaves = {f"{name}/{i}": np.asarray(x) for name, p in t.policies.items()
            for i, x in enumerate(jax.tree.leaves(p.params))}
  np.savez(workdir / "final_params.npz", **leaves)


if __name__ == "__main__":
  cli.guard(main, sys.argv)
