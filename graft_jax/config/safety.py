"""The config section ``safety``: what a run does with a non-finite value and with a workdir
that holds another run.

Registered like a method's section (``run_config.add_method_section``), so it is
``cfg.safety`` in every config built once ``graft_jax.train.methods`` is imported;
neither field changes the math, so a resumed run may change both.
"""

from __future__ import annotations

import dataclasses

from graft_jax.config import run_config
from graft_jax.config.errors import ConfigError

NONFINITE_MODES = ("stop", "skip")


@dataclasses.dataclass(frozen=True)
class SafetyConfig:
  """``nonfinite`` (graft_jax.outputs.finite_guard) and ``overwrite``
  (graft_jax.outputs.workdir_runs)."""
  # 'stop': a non-finite loss, gradient norm or updated parameter ends the run with one
  # line, the step uncommitted; 'skip': that optimizer step keeps the previous
  # parameters and optimizer state, and update/skipped_nonfinite counts it.
  nonfinite: str = "stop"
  # With checkpoint.resume=False, a workdir holding another run's checkpoints or metrics
  # is refused; True first moves that run aside to <workdir>.replaced-<UTC time>.
  overwrite: bool = False

  def __post_init__(self):
    if self.nonfinite not in NONFINITE_MODES:
      raise ConfigError(f"safety.nonfinite must be one of {', '.join(NONFINITE_MODES)}, got "
                        f"{self.nonfinite!r}", field="safety.nonfinite")


run_config.add_method_section("safety", SafetyConfig)
