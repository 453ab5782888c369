"""``models``: a run of any number >= 2 of models, set from a config file or the command line."""

import json

import pytest

from configs import base, toy
from graft_jax.config import run_config as config_lib
from graft_jax.rollout import vllm_setup
from graft_jax.train import methods
from graft_jax.config import checks as config_checks
from graft_jax.config import placement as config_placement

THREE = [("runs/trio/a", "toy_a"), ("runs/trio/b", "toy_b"), ("runs/trio/c", "toy_c")]


def three(method="graft", **fields):
  cd = toy.get_config(method)
  with cd.unlocked():
    base.set_models(cd, THREE)
    for k, v in fields.items():
      config_lib.config_load.set_field(cd, k, v)
  return cd


def test_three_models_load_and_validate():
  cfg = config_lib.from_config_dict(three())
  assert [(m.path, m.name) for m in config_lib.policy_configs(cfg)] == THREE
  assert cfg.model_a == config_lib.PolicyConfig(name="model_a")
  assert all(methods.trains(cfg, m) for m in cfg.models)
  # The stored config rebuilds the same run.
  again = config_lib.from_config_dict(json.loads(json.dumps(config_lib.to_dict(cfg))))
  assert again == cfg


def test_a_pair_config_is_unchanged():
  cfg = config_lib.from_config_dict(toy.get_config("graft"))
  assert cfg.models == () and config_lib.policy_configs(cfg) == (cfg.model_a, cfg.model_b)


@pytest.mark.parametrize("entries", [
    [{"path": "p", "name": "x"}, config_lib.PolicyConfig("q", "y")],
    ({"path": "p", "name": "x"}, {"path": "q", "name": "y"}, {"path": "r", "name": "z"})])
def test_entries_may_be_mappings_or_policy_configs(entries):
  cd = toy.get_config("graft")
  with cd.unlocked():
    base.set_models(cd, [])
    cd.models = entries
  names = [m.name for m in config_lib.from_config_dict(cd).models]
  assert names == ["x", "y", "z"][:len(entries)]


@pytest.mark.parametrize("mutate, line", [
    (lambda cd: setattr(cd.model_b, "path", "elsewhere"),
     "models and model_b are both set; list every model in models and leave model_a / "
     "model_b at their defaults"),
    (lambda cd: setattr(cd, "models", cd.models[:1]),
     "models must list at least 2 models, got 1; leave it empty to use model_a and model_b"),
    (lambda cd: setattr(cd, "models", cd.models[:2] + ({"path": "x", "name": "toy_a"},)),
     "models[0].name and models[2].name must differ (they key logs and metrics), both are "
     "'toy_a'"),
    (lambda cd: setattr(cd, "models", cd.models[:2] + ({"path": "x", "name": "../c"},)),
     "models[2].name must be a file-safe name ([A-Za-z0-9._-], not starting with . or -), "
     "got '../c'"),
    (lambda cd: setattr(cd, "models", cd.models[:2] + ({"path": "x", "nme": "c"},)),
     "unknown config key models[2].nme (known: name, path, revision)"),
])
def test_bad_model_lists_name_the_field(mutate, line):
  cd = three()
  with cd.unlocked():
    mutate(cd)
  with pytest.raises(config_lib.ConfigError) as e:
    config_lib.from_config_dict(cd)
  assert str(e.value) == line


@pytest.mark.parametrize("method", ["hacpo", "sgt", "replay"])
def test_pair_only_methods_refuse_three_models(method):
  cd = three(method, **{"replay.log_dir": "/nonexistent"})
  with pytest.raises(config_lib.ConfigError) as e:
    methods.from_config_dict(cd)
  assert str(e.value) == (f"models has 3 entries but method={method} is defined for a pair of "
                          f"models; list 2 models or use method=graft or grpo")
  assert e.value.field == "models"
  with cd.unlocked():
    cd.models = cd.models[:2]
  methods.from_config_dict(cd)  # a pair in `models` is fine


def test_every_pair_only_method_is_refused():
  pair_only = {name for name, m in methods.REGISTRY.items() if m.pair_only}
  assert pair_only == {"hacpo", "sgt", "replay"}


def test_vllm_places_a_server_per_model_past_the_pair():
  cfg = config_lib.from_config_dict(three(**{
      "engine": "vllm", "jax_devices": (0,), "vllm.gpus.model_a": (1,),
      "vllm.gpus.model_b": (2,), "vllm.gpus.more": ((3, 4),)}))
  assert config_placement.server_gpus(cfg) == [
      ("vllm.gpus.model_a", "toy_a", (1,)), ("vllm.gpus.model_b", "toy_b", (2,)),
      ("vllm.gpus.more[0]", "toy_c", (3, 4))]
  assert vllm_setup.placement_options(cfg, (3, 4)) == {
      "host": "", "tensor_parallel_size": 2, "env": (("CUDA_VISIBLE_DEVICES", "3,4"),)}
  unplaced = config_lib.from_config_dict(three(engine="vllm"))  # every server sees every GPU
  assert vllm_setup.placement_options(unplaced, ()) == {"host": ""}


def test_vllm_placement_of_a_third_model_is_checked_by_its_field():
  with pytest.raises(config_lib.ConfigError) as e:  # on the trainer's GPU, leaving it 0.05
    config_lib.from_config_dict(three(**{"engine": "vllm", "jax_devices": (0,),
                                         "vllm.gpus.more": ((0,),),
                                         "vllm.gpu_memory_utilization": 0.9}))
  assert e.value.field == "vllm.gpus.more[0]"
  assert str(e.value).startswith("vllm.gpus.more[0]=(0,) and jax_devices=(0,) share GPU 0, "
                                 "and 1 x vllm.gpu_memory_utilization=0.9 leaves the trainer")
  with pytest.raises(config_lib.ConfigError) as e:  # more entries than models past the second
    config_lib.from_config_dict(three(**{"vllm.gpus.more": ((1,), (2,))}))
  assert e.value.field == "vllm.gpus.more"
  assert str(e.value) == ("vllm.gpus.more places the models after the second (1 in this run), "
                          "but has 2 entries")


def test_command_line_sets_the_whole_list_or_says_how():
  cd = toy.get_config("graft")
  with cd.unlocked():
    base.set_models(cd, [])
  config_lib.apply_overrides(
      cd, ["models=[{'path': 'p', 'name': 'x'}, {'path': 'q', 'name': 'y'}]"], flag="--config.")
  assert [m.name for m in config_lib.from_config_dict(cd).models] == ["x", "y"]
  with pytest.raises(config_lib.ConfigError) as e:
    config_lib.apply_overrides(cd, ["models.0.path=z"], flag="--config.")
  assert str(e.value) == ("--config.models.0.path=z: 'models' is a list; set it whole "
                          "(--config.models=\"[...]\", a Python literal)")


def test_models_are_locked_on_resume():
  old = config_lib.to_dict(config_lib.from_config_dict(three()))
  new = json.loads(json.dumps(old))
  new["models"][2]["path"] = "runs/other/c"
  with pytest.raises(config_lib.ConfigError, match=r"^models is \["):
    config_checks.check_resume(old, new, where="config.json")


def test_paths_are_checked_per_entry(tmp_path):
  cfg = config_lib.from_config_dict(three(workdir=str(tmp_path / "run")))
  with pytest.raises(config_lib.PathError, match=r"^models\[0\]\.path: no such folder"):
    config_lib.check_paths(cfg)


def test_trainer_refuses_more_models_than_the_config_names(tmp_path):
  from graft_jax.train.trainer import Trainer  # pylint: disable=import-outside-toplevel
  cd = toy.get_config("graft")
  with cd.unlocked():
    cd.workdir = str(tmp_path)
  cfg = config_lib.from_config_dict(cd)
  with pytest.raises(ValueError) as e:
    Trainer(cfg, [], {k: (None, None) for k in "abc"}, reward_fn=lambda texts, golds: None)
  assert str(e.value) == ("Trainer got 3 models but the config names 2 (toy_a, toy_b); list them "
                          "all in models")
