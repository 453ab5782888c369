"""Nothing non-finite becomes a run's state: the checks between a step's numbers and its
commit (metrics row, checkpoint, export).

A NaN reward, advantage, loss, gradient norm or updated parameter would be
written into the metrics row, then every parameter, then every checkpoint that
rotation keeps. The compiled optimizer step flags its non-finite values
(`graft_jax.core.finite`) and, in the skip mode, returns the state it was
given; here the host reads the flags before the step's state is used, and
either stops the run with one line (``safety.nonfinite='stop'``, the default)
or leaves that update out of the row and counts it (``'skip'``:
``update/skipped_nonfinite``). Rewards and advantages stop the run in both
modes: they are the run's input, which skipping an update cannot make finite.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

from graft_jax.core.finite import QUANTITIES
from graft_jax.outputs import metric_kinds as kinds


class NonFiniteError(RuntimeError):
  """A non-finite value that would have become state; names the model, step and quantity."""

  def __init__(self, model: str, quantity: str, step: int | None = None):
    self.model, self.quantity, self.step = model, quantity, step
    at = "" if step is None else f" at step {step + 1}"
    skip = "; safety.nonfinite=skip skips such updates" if quantity in QUANTITIES else ""
    super().__init__(f"{model}: non-finite {quantity}{at}; the step was not committed (no "
                     f"metrics row, checkpoint or export){skip}")

  def at(self, step: int) -> NonFiniteError:
    """The same error naming ``step`` (0-based, printed 1-based like the progress lines)."""
    return NonFiniteError(self.model, self.quantity, step)


@contextlib.contextmanager
def naming_step(step: int):
  """Re-raises a `NonFiniteError` from the block with ``step`` in its message."""
  try:
    yield
  except NonFiniteError as e:
    raise e.at(step) from None


def flags(flags_3) -> dict:
  """An update's flags (`core.finite.nonfinite_flags`) as metrics: which quantity was
  non-finite first (1-based; 0 none) and whether the update was skipped."""
  any_bad = flags_3.any()
  return {**kinds.metrics(kinds.MAX, nonfinite_first=jnp.where(any_bad, flags_3.argmax() + 1, 0)),
          **kinds.metrics(kinds.SUM, skipped_nonfinite=any_bad.astype(jnp.float32))}


def screen(model: str, per_update: list[list[dict]], cfg) -> list[list[dict]]:
  """The updates' metrics, read to the host, with the non-finite ones handled by
  ``safety.nonfinite``: 'stop' raises `NonFiniteError` for the first; 'skip' keeps of
  each such update only its count (its loss and norms are NaN). The flag metric
  itself is dropped."""
  mode, out = cfg.safety.nonfinite, []
  for parts in jax.device_get(per_update):
    first = max(int(p["nonfinite_first"].value) for p in parts if "nonfinite_first" in p)
    if first and mode == "stop":
      raise NonFiniteError(model, QUANTITIES[first - 1])
    if first:
      parts = [kinds.metrics(kinds.SUM, skipped_nonfinite=1.0, rows_run=0.0)]
    out.append([{k: m for k, m in p.items() if k != "nonfinite_first"} for p in parts])
  return out


def check_rollouts(rolls: dict) -> None:
  """Raises `NonFiniteError` naming the first non-finite reward or advantage (its value
  and row) of the step's rollouts (``{model: Rollout}``)."""
  for name, roll in rolls.items():
    for quantity, values in (("reward", roll.rewards_GxN), ("advantage", roll.adv_GxN)):
      check_values(name, quantity, values)


def check_values(model: str, quantity: str, values) -> None:
  """Raises `NonFiniteError` when ``values`` (any shape) holds a NaN or infinity."""
  flat = np.asarray(values, np.float64).reshape(-1)
  bad = np.flatnonzero(~np.isfinite(flat))
  if bad.size:
    raise NonFiniteError(model, f"{quantity} ({flat[bad[0]]} for row {bad[0]}, "
                         f"{bad.size} of {flat.size} rows)")
