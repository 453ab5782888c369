"""Training methods as plug-ins, registered by their config name (``cfg.method``).

Adding a method is one new module here, a ``Method`` subclass, and one entry
in ``REGISTRY``; ``train_step`` and the trainer only ever ask the method.
"""

from __future__ import annotations

from graft_jax.config.checks import policy_configs
from graft_jax.train.methods.base import BuiltRows, Method
from graft_jax.train.methods.graft import Graft
from graft_jax.train.methods.grpo import Grpo
from graft_jax.train.methods.hacpo import Hacpo
from graft_jax.train.methods.replay import Replay
from graft_jax.train.methods.sgt import Sgt

REGISTRY: dict[str, type[Method]] = {m.name: m for m in (Graft, Grpo, Hacpo, Sgt, Replay)}


def make(cfg) -> Method:
  """The method ``cfg.method`` names, for ``cfg``."""
  if cfg.method not in REGISTRY:
    raise ValueError(f"method: unknown {cfg.method!r} (known: {', '.join(REGISTRY)})")
  return REGISTRY[cfg.method](cfg)


def trains(cfg, model) -> bool:
  """Whether the config's ``model`` (one of ``config.policy_configs(cfg)``) samples and
  updates; replay's peer does not: its logs stand in for it."""
  return model.name in make(cfg).trained([m.name for m in policy_configs(cfg)])


__all__ = ["REGISTRY", "BuiltRows", "Method", "make", "trains"]
