"""A method's own settings are its config section: declared in the method's file, added by
its registry entry alone (overrides, the stored config and the resume lock included), and
never named in graft_jax/config/run_config.py."""

import dataclasses
import pathlib
import re

import pytest

from graft_jax.config import checks as config_checks
from graft_jax.config import run_config as config_lib
from graft_jax.train import methods
from graft_jax.train.methods.grpo import Grpo

RUN_CONFIG = pathlib.Path(config_lib.__file__)


@dataclasses.dataclass(frozen=True)
class EchoSettings:
  scale: float = 0.5
  passes: int = 2


class Echo(Grpo):
  """A method of this file: GRPO's rows, with settings of its own."""

  name = "echo"
  Settings = EchoSettings
  resume_locked = ("echo",)


@pytest.fixture
def echo(monkeypatch):
  """`Echo` registered, the registry and the sections restored afterwards."""
  monkeypatch.setattr(methods, "REGISTRY", dict(methods.REGISTRY))
  monkeypatch.setattr(config_lib, "_METHOD_SECTIONS", dict(config_lib._METHOD_SECTIONS))
  methods.register(Echo)


def _config(*overrides):
  cd = methods.config_dict()
  config_lib.apply_overrides(cd, ["method=echo", *overrides])
  return methods.from_config_dict(cd)


@pytest.mark.usefixtures("echo")
def test_a_registry_entry_alone_gives_the_method_its_section():
  assert methods.config_dict().echo.to_dict() == {"scale": 0.5, "passes": 2}
  cfg = _config("echo.scale=0.25")
  assert cfg.echo == EchoSettings(scale=0.25, passes=2)
  assert config_lib.to_dict(cfg)["echo"] == {"scale": 0.25, "passes": 2}
  assert config_lib.from_config_dict(config_lib.to_dict(cfg)) == cfg
  assert isinstance(methods.make(cfg), Echo)


@pytest.mark.usefixtures("echo")
def test_the_section_is_type_checked_and_unknown_keys_name_it():
  with pytest.raises(config_lib.ConfigError, match="echo.passes must be int"):
    _config("echo.passes=1.5")
  cd = config_lib.to_dict(_config())
  cd["echo"]["pases"] = 3
  with pytest.raises(config_lib.ConfigError, match="unknown config key echo.pases"):
    config_lib.from_config_dict(cd)


@pytest.mark.usefixtures("echo")
def test_a_resume_may_not_change_the_section_its_method_locks():
  old, new = (config_lib.to_dict(_config(f"echo.scale={s}")) for s in (0.5, 0.25))
  with pytest.raises(config_lib.ConfigError, match="^echo.scale is 0.25 but"):
    config_checks.check_resume(old, new, where="w/config.json",
                               locked=methods.lookup("echo").resume_locked)


def test_a_section_may_not_hide_a_shared_field_nor_be_declared_twice(monkeypatch):
  monkeypatch.setattr(config_lib, "_METHOD_SECTIONS", dict(config_lib._METHOD_SECTIONS))
  with pytest.raises(ValueError, match="'graft' would hide"):
    config_lib.add_method_section("graft", EchoSettings)
  config_lib.add_method_section("echo", EchoSettings)
  with pytest.raises(ValueError, match="two settings classes"):
    config_lib.add_method_section("echo", dataclasses.make_dataclass("Other", []))


def test_run_config_names_no_method_of_its_own_settings():
  owners = [name for name, m in methods.REGISTRY.items() if "Settings" in vars(m)]
  assert "luffy" in owners
  source = RUN_CONFIG.read_text()
  for name in owners:
    assert not re.search(rf"\b{name}\b", source, re.IGNORECASE), (
        f"{RUN_CONFIG.name} names the method {name!r}: its settings belong in its own file")
