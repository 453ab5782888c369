"""A resumed run restores the method's state from the checkpoint: HACPO's capability
tracker and replay's count of prompts missing from the peer's logs."""

import dataclasses

import pytest

from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

pytestmark = pytest.mark.slow  # three one-step runs of the tiny pair


def trainer(cfg, problems=None):
  return Trainer(cfg, problems or tiny_pair.problems(), tiny_pair.make_models(),
                 reward_fn=tiny_pair.contains_reward)


def test_hacpo_resumes_with_its_capability_tracker(tmp_path):
  cfg = make_cfg("hacpo", tmp_path)
  t = trainer(cfg)
  t.run(1)
  saved = t.method.state_dict()
  t.close()
  assert saved["capability"]["steps"] == 1
  resumed = trainer(cfg)
  assert resumed.step == 1 and resumed.method.state_dict() == saved
  resumed.close()
  # Beside the run: resume=False refuses a workdir holding one (outputs.workdir_runs).
  fresh = trainer(dataclasses.replace(cfg, workdir=str(tmp_path / "fresh"),
                                      checkpoint=dataclasses.replace(cfg.checkpoint, resume=False)))
  assert fresh.method.state_dict() != saved  # the check above was not vacuous
  fresh.close()


def test_replay_resumes_with_its_missing_count(tmp_path):
  make = lambda **kw: make_cfg("graft", tmp_path / "graft", **kw)
  t = trainer(make())
  t.run(1)
  t.close()
  # Prompts under ids the peer never logged: every one is missing.
  renamed = [dataclasses.replace(p, id=f"unlogged-{p.id}") for p in tiny_pair.problems()]
  cfg = make_cfg("replay", tmp_path / "replay",
                 **{"replay.log_dir": str(tmp_path / "graft" / "peer_logs")})
  t = trainer(cfg, renamed)
  t.run(1)
  assert t.method.state_dict() == {"missing": cfg.prompts_per_step}
  t.close()
  resumed = trainer(cfg, renamed)
  assert resumed.method.state_dict() == {"missing": cfg.prompts_per_step}
  resumed.close()
