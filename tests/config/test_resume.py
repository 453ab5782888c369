"""A resumed run keeps the config fields that change the math; others may change and are logged."""

import json
import logging

import numpy as np
import pytest

from graft_jax.experiments import toy_compare
from graft_jax.config import run_config as config_lib
from graft_jax.config import checks as config_checks
from graft_jax.train import methods
from graft_jax.outputs.checkpoint import Checkpointer
from tests.train import tiny_pair


def _cd(workdir, **fields):
  """configs/toy.py:graft in ``workdir`` with dotted ``fields`` set, as a ConfigDict."""
  cd = config_lib.load_config("configs/toy.py:graft")
  with cd.unlocked():
    cd.workdir = str(workdir)
    config_lib.apply_overrides(cd, [f"{k}={v}" for k, v in fields.items()])
  return cd


def _cfg(workdir, **fields):
  return config_lib.from_config_dict(_cd(workdir, **fields))


def _checkpoint(cfg):
  """A committed checkpoint step in ``cfg.checkpoint_dir`` (a stand-in state)."""
  with Checkpointer(cfg.checkpoint_dir, every_steps=1, keep=1, async_save=False) as ckpt:
    assert ckpt.save(1, {"w": np.zeros(2, np.float32)}, {"step": 1})


def test_check_resume_names_the_locked_field_and_both_values():
  old = config_lib.to_dict(_cfg("w"))
  new = config_lib.to_dict(_cfg("w", **{"optimizer.lr": 3e-4}))
  with pytest.raises(config_lib.ConfigError) as err:
    config_checks.check_resume(old, new, where="w/config.json")
  stored = old["optimizer"]["lr"]  # the toy config's rate, whatever configs/toy.py sets
  assert stored != 3e-4
  assert str(err.value) == (
      f"optimizer.lr is 0.0003 but the checkpointed run in w/config.json has {stored!r}; a "
      "resumed run keeps every field that changes the math (use another workdir, or "
      "checkpoint.resume=False to start over)")
  assert err.value.field == "optimizer.lr"


@pytest.mark.parametrize("field,value", [
    ("method", "grpo"), ("seed", 1), ("n", 4), ("clip_high", 0.3), ("graft.delta", 0.9),
    ("model_b.path", "elsewhere"), ("data.synthetic.seed", 3), ("reward.kind", "synthetic_exact"),
    ("scale_by_std", False), ("rollout.temperature", 0.7)])
def test_every_math_field_is_locked(field, value):
  old = config_lib.to_dict(_cfg("w"))
  new = config_lib.to_dict(_cfg("w", **{field: value}))
  with pytest.raises(config_lib.ConfigError, match=f"^{field} is "):
    config_checks.check_resume(old, new, where="w/config.json",
                               locked=methods.lookup("graft").resume_locked)


def _before_after(preset, **fields):
  """configs/toy.py:<preset> as stored, and again with dotted ``fields`` changed."""
  cd = config_lib.load_config(f"configs/toy.py:{preset}")
  old = config_lib.to_dict(config_lib.from_config_dict(cd))
  with cd.unlocked():
    config_lib.apply_overrides(cd, [f"{k}={v}" for k, v in fields.items()])
  return old, config_lib.to_dict(config_lib.from_config_dict(cd))


def test_a_methods_own_section_is_locked_by_that_method():
  old, new = _before_after("hacpo", **{"hacpo.ratio_clamp": "0.2,5.0"})
  with pytest.raises(config_lib.ConfigError, match="^hacpo.ratio_clamp is "):
    config_checks.check_resume(old, new, where="w/config.json",
                               locked=methods.lookup("hacpo").resume_locked)


@pytest.mark.parametrize("preset", ["graft", "grpo"])
def test_another_methods_section_may_change(preset):
  """hacpo.* is HACPO's math, not GRAFT's or GRPO's: their resume logs the change."""
  old, new = _before_after(preset, **{"hacpo.ratio_clamp": "0.2,5.0"})
  got = config_checks.check_resume(old, new, where="w/config.json",
                                   locked=methods.lookup(preset).resume_locked)
  assert [field for field, _, _ in got] == ["hacpo.ratio_clamp"]


def test_a_checkpoint_layout_field_is_refused_with_its_own_reason():
  old = config_lib.to_dict(_cfg("w"))
  was = old["perf"]["scan_layers"]
  new = config_lib.to_dict(_cfg("w", **{"perf.scan_layers": not was}))
  with pytest.raises(config_lib.ConfigError) as err:
    config_checks.check_resume(old, new, where="w/config.json")
  assert str(err.value) == (
      f"perf.scan_layers is {not was!r} but the checkpointed run in w/config.json has "
      f"{was!r}; it decides how the checkpoint stores the parameters and "
      f"optimizer state, so resume with perf.scan_layers={was!r}")
  assert err.value.field == "perf.scan_layers"


def test_an_older_config_json_is_read_under_the_moved_fields_new_names():
  """A config.json written before the perf section stored its fields at the top (and the
  sampler's two in rollout); each is compared with the field it became."""
  new = config_lib.to_dict(_cfg("w"))
  old = json.loads(json.dumps(new))
  perf = old.pop("perf")
  old["rollout"].update(max_kv_bytes=2**20, streams=perf.pop("sampler_streams"))
  del perf["sampler_max_kv_bytes"]
  del perf["packed_update"]  # a field added after the perf section
  old.update(perf)
  assert config_checks.check_resume(old, new, where="w/config.json") == [
      ("perf.packed_update", None, True),
      ("perf.sampler_max_kv_bytes", 2**20, new["perf"]["sampler_max_kv_bytes"])]
  old["scan_layers"] = not perf["scan_layers"]
  with pytest.raises(config_lib.ConfigError, match="^perf.scan_layers is "):
    config_checks.check_resume(old, new, where="w/config.json")


def test_other_fields_may_change_and_are_returned():
  old = config_lib.to_dict(_cfg("w"))
  new = config_lib.to_dict(_cfg("w2", **{"eval.every_steps": 2, "total_steps": 160,
                                         "logging.tensorboard": False, "mesh.fsdp": 2,
                                         "perf.sampler_max_kv_bytes": 2**20}))
  del old["perf"]["remat"]  # a field an older config.json did not have
  assert config_checks.check_resume(old, new, where="w/config.json") == [
      ("eval.every_steps", 5, 2), ("logging.tensorboard", True, False), ("mesh.fsdp", 1, 2),
      ("perf.remat", None, "none"), ("perf.sampler_max_kv_bytes", 0, 2**20),
      ("total_steps", old["total_steps"], 160),  # the toy config's, whatever configs/toy.py sets
      ("workdir", "w", "w2")]


def test_write_run_config_refuses_only_with_a_checkpoint(tmp_path, caplog):
  first = _cfg(tmp_path)
  config_lib.write_run_config(first)
  stored = (tmp_path / "config.json").read_text()
  config_lib.write_run_config(_cfg(tmp_path, **{"optimizer.lr": 3e-4}))  # no checkpoint: a new run
  config_lib.write_run_config(first)
  _checkpoint(first)
  with pytest.raises(config_lib.ConfigError, match="^optimizer.lr is 0.0003 but the checkpointed"):
    config_lib.write_run_config(_cfg(tmp_path, **{"optimizer.lr": 3e-4}))
  assert (tmp_path / "config.json").read_text() == stored  # untouched
  with caplog.at_level(logging.INFO):
    config_lib.write_run_config(_cfg(tmp_path, **{"eval.every_steps": 2}))
  assert "resuming with eval.every_steps changed: 5 -> 2" in caplog.text
  assert json.loads((tmp_path / "config.json").read_text())["eval"]["every_steps"] == 2
  # Starting over in the same workdir (no resume) may change anything.
  config_lib.write_run_config(_cfg(tmp_path, **{"optimizer.lr": 3e-4,
                                                "checkpoint.resume": False}))
  assert json.loads((tmp_path / "config.json").read_text())["optimizer"]["lr"] == 3e-4


@pytest.mark.slow  # one real step: about 30 s of CPU, mostly compiling
def test_resuming_a_tiny_toy_run(tmp_path, caplog):
  """A real 1-step run (two tiny models, their own reward by dotted path), then two resumes."""
  models = tiny_pair.make_models()  # a resume restores the checkpointed weights into them

  def run(**fields):
    cd = _cd(tmp_path, **{"total_steps": 1, "prompts_per_step": 4, "num_minibatches": 1, "n": 2,
                          "max_response_len": 4, "hacpo.minibatch_prompts": 4,
                          "eval.every_steps": 0, "logging.tensorboard": False,
                          "logging.progress_bar": False, "logging.peer_log": False,
                          "checkpoint.every_steps": 1, "optimizer.lr": 2e-4,
                          "reward.kind": "tests.train.tiny_pair:contains_reward", **fields})
    return toy_compare.train(config_lib.from_config_dict(cd), tiny_pair.problems(16), models)
  run()
  assert (tmp_path / "checkpoints" / "1").is_dir()
  with pytest.raises(config_lib.ConfigError, match=r"^optimizer.lr is 0.0003 but the "
                     r"checkpointed run in .*config.json has 0.0002"):
    run(**{"optimizer.lr": 3e-4})
  with pytest.raises(config_lib.ConfigError, match=r"^perf.scan_layers is True but the "
                     r"checkpointed run in .*config.json has False; it decides how the "
                     r"checkpoint stores"):
    run(**{"perf.scan_layers": True})
  with caplog.at_level(logging.INFO):
    run(**{"eval.every_steps": 3})  # resumes at step 1 of 1: nothing left to train
  assert "resuming with eval.every_steps changed: 0 -> 3" in caplog.text
  assert f"resumed {tmp_path} at step 1" in caplog.text
  rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in rows] == [0]
  assert json.loads((tmp_path / "config.json").read_text())["eval"]["every_steps"] == 3
