"""Training methods as plug-ins, registered by their config name (``cfg.method``).

Adding a method is one new module here, a ``Method`` subclass, and one entry
in the ``register`` line; ``train_step``, the trainer, the config checks and the
planner only ever ask the method. A method's own settings (its ``Settings``
dataclass) become the config section ``cfg.<name>`` when it is registered.
"""

from __future__ import annotations

from graft_jax.config import run_config as config_lib, safety  # noqa: F401 (cfg.safety)
from graft_jax.config.checks import policy_configs, policy_fields
from graft_jax.config.errors import ConfigError, did_you_mean
from graft_jax.config.run_config import TrainConfig
from graft_jax.train.methods.base import BuiltRows, Method
from graft_jax.train.methods.graft import Graft
from graft_jax.train.methods.grpo import Grpo
from graft_jax.train.methods.hacpo import Hacpo
from graft_jax.train.methods.luffy import Luffy
from graft_jax.train.methods.replay import Replay
from graft_jax.train.methods.sgt import Sgt

REGISTRY: dict[str, type[Method]] = {}


def register(method: type[Method]) -> type[Method]:
  """Adds ``method`` under its name, and the ``Settings`` it declares (not one it
  inherits) as the config section ``cfg.<name>`` of every config built from now on."""
  REGISTRY[method.name] = method
  if "Settings" in vars(method):
    config_lib.add_method_section(method.name, method.Settings)
  return method


for _method in (Graft, Grpo, Hacpo, Sgt, Replay, Luffy):
  register(_method)


def config_dict():
  """`config.run_config.config_dict`, every registered method's section in it."""
  return config_lib.config_dict()


def lookup(name: str) -> type[Method]:
  """The registered method ``name``; else one line naming the field and the closest name."""
  if name not in REGISTRY:
    raise ConfigError(f"method must be one of {', '.join(REGISTRY)}, got {name!r}"
                      f"{did_you_mean(str(name), REGISTRY)}", field="method")
  return REGISTRY[name]


def from_config_dict(cd) -> TrainConfig:
  """`config.run_config.from_config_dict` for a run: ``method`` is looked up first (before
  any other field is read), then the config's checks run, then the method's own."""
  mapping = cd.to_dict() if hasattr(cd, "to_dict") else dict(cd)
  method = lookup(mapping.get("method", TrainConfig.method))
  cfg = config_lib.from_config_dict(mapping)
  method.check(cfg)
  return cfg


def check_paths(cfg, *, pending=()) -> None:
  """`config.checks.check_paths` for the models the method loads, then the method's own
  inputs (`Method.paths`)."""
  method = lookup(cfg.method)
  config_lib.check_paths(cfg, pending=pending,
                         models=[(f, m) for f, m in policy_fields(cfg) if trains(cfg, m)])
  method.paths(cfg)


def write_run_config(cfg):
  """`config.run_config.write_run_config`, the method's own sections (``resume_locked``)
  locked on resume as the shared ones are."""
  return config_lib.write_run_config(cfg, locked=lookup(cfg.method).resume_locked)


def make(cfg) -> Method:
  """The method ``cfg.method`` names, for ``cfg``, its settings checked."""
  method = lookup(cfg.method)
  method.check(cfg)
  return method(cfg)


def trains(cfg, model) -> bool:
  """Whether the config's ``model`` (one of ``config.policy_configs(cfg)``) samples and
  updates; replay's peer does not: its logs stand in for it."""
  return model.name in make(cfg).trained([m.name for m in policy_configs(cfg)])


__all__ = ["REGISTRY", "BuiltRows", "Method", "check_paths", "config_dict", "from_config_dict",
           "lookup", "make", "register", "trains", "write_run_config"]
