"""``checkpoint.resume=False`` never mixes two runs in one workdir: it refuses one that holds
another run, or with ``safety.overwrite`` moves that run aside whole."""

import json
import logging

import jax.numpy as jnp
import pytest

from graft_jax.outputs import checkpoint, workdir_runs
from graft_jax.outputs.workdir_lock import LOCK_NAME
from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg


def _old_run(workdir):
  """A previous run's outputs: a committed checkpoint and a metrics row."""
  with checkpoint.Checkpointer(workdir / "checkpoints", every_steps=1, keep=3,
                               async_save=False) as ckpt:
    ckpt.save(1, {"w": jnp.ones(4)}, {"step": 1})
  (workdir / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
  (workdir / "config.json").write_text("{}\n")
  (workdir / LOCK_NAME).write_text("")


def test_a_fresh_run_over_another_refuses_in_one_line_before_anything_is_written(tmp_path):
  _old_run(tmp_path)
  before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
  cfg = make_cfg("grpo", tmp_path, **{"checkpoint.resume": False})
  with pytest.raises(workdir_runs.WorkdirInUseError) as err:
    Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(),
            reward_fn=tiny_pair.contains_reward)
  message = str(err.value)
  assert "\n" not in message
  assert message.startswith(f"{tmp_path} holds another run ({tmp_path}/checkpoints, "
                            f"{tmp_path}/metrics.jsonl) and checkpoint.resume=False would mix")
  assert "safety.overwrite=True" in message
  assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_overwrite_moves_the_old_run_aside_whole(tmp_path, caplog):
  workdir = tmp_path / "run"
  workdir.mkdir()
  _old_run(workdir)
  cfg = make_cfg("grpo", workdir, **{"checkpoint.resume": False, "safety.overwrite": True})
  with caplog.at_level(logging.WARNING):
    workdir_runs.claim(cfg)
  aside, = tmp_path.glob("run.replaced-*")
  assert sorted(p.name for p in aside.iterdir()) == ["checkpoints", "config.json",
                                                      "metrics.jsonl"]
  assert (aside / "checkpoints" / "1" / checkpoint.COMMIT_MARKER).is_file()
  assert [p.name for p in workdir.iterdir()] == [LOCK_NAME]  # the holder's lock stays
  assert len([r for r in caplog.records if "moved the previous run" in r.getMessage()]) == 1
  workdir_runs.claim(cfg)  # nothing left to move: a second start goes ahead
  assert len(list(tmp_path.glob("run.replaced-*"))) == 1


def test_a_resumed_run_and_an_empty_workdir_are_left_alone(tmp_path):
  _old_run(tmp_path)
  workdir_runs.claim(make_cfg("grpo", tmp_path))  # resume=True (the default)
  fresh = tmp_path / "fresh"
  workdir_runs.claim(make_cfg("grpo", fresh, **{"checkpoint.resume": False}))
  assert (tmp_path / "metrics.jsonl").is_file() and not list(tmp_path.glob("*.replaced-*"))


def test_the_refusal_is_a_usage_exit_and_a_non_finite_stop_a_fault():
  from graft_jax import cli
  from graft_jax.outputs import finite_guard
  refused = workdir_runs.WorkdirInUseError("runs/x holds another run (runs/x/metrics.jsonl)")
  assert cli.one_line(refused).startswith("workdir in use error: runs/x holds another run")
  assert cli.exit_code(refused) == cli.USAGE_EXIT
  stopped = finite_guard.NonFiniteError("toy_b", "gradient norm", 6)
  assert cli.one_line(stopped).startswith("non finite error: toy_b: non-finite gradient norm "
                                          "at step 7; the step was not committed")
  assert cli.exit_code(stopped) == cli.ERROR_EXIT
