"""A weight push that never completes: the run saves the step and stops, with or without a signal.

The push of the first model's step-1 weights waits, under the real
``weight_transfer.deadline.Deadline``, on a call that never returns (the test
double of ``tests/rollout/test_sync_deadline``, standing in for the NCCL calls
alone, which need a GPU). The engine around it keeps the abort as ``VLLMEngine``
does (``sync_failure``; no sampling from the older weights). The step is complete
all the same, so the run writes its row, saves it and stops: with one line of its
own, or, when SIGTERM came during the stalled push, as any stopped run does
(``preemption.Stopped``). The checkpoint holds exactly the parameters of an
uninterrupted run after the same steps.
"""

import os
import signal

import jax
import numpy as np
import pytest

from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.rollout.weight_transfer import SyncAborted, deadline
from graft_jax import preemption
from graft_jax.outputs import checkpoint
from graft_jax.train.trainer import Trainer
from tests.rollout.test_sync_deadline import NeverReturns
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

pytestmark = pytest.mark.slow  # three tiny runs of two steps

LIMIT_S = 0.5
STEPS = 3  # asked for; the stall in step 1 stops the run after two


class StalledPushEngine:
  """The policy's own JAX sampler, plus a push whose `stall_at`-th call never completes."""

  def __init__(self, engine, stall_at: int, on_stall=lambda: None):
    self.engine, self.stall_at, self.on_stall = engine, stall_at, on_stall
    self.syncs, self.sync_failure = 0, None

  def set_weights(self, model) -> None:
    self.engine.set_weights(model)
    self.syncs += 1
    if self.syncs == self.stall_at:
      call = NeverReturns()
      self.on_stall()
      try:
        deadline.Deadline(LIMIT_S, "toy_a: NCCL weight push").wait(
            call.done, step="bucket 1 of 1", abort=call.abort)
      except SyncAborted as e:
        self.sync_failure = e

  def generate(self, *args, **kwargs):
    if self.sync_failure is not None:
      raise self.sync_failure
    return self.engine.generate(*args, **kwargs)

  def __getattr__(self, name):
    return getattr(self.engine, name)


def _trainer(workdir):
  return Trainer(make_cfg("graft", workdir), tiny_pair.problems(), tiny_pair.make_models(),
                 reward_fn=tiny_pair.contains_reward)


def _saved_params(workdir):
  """The parameters a resumed run starts from."""
  trainer = _trainer(workdir)
  try:
    return trainer.step, {n: jax.device_get(p.params) for n, p in trainer.policies.items()}
  finally:
    trainer.close()


def _stalled_run(workdir, on_stall=lambda: None):
  trainer = _trainer(workdir)
  policy = trainer.policies["toy_a"]
  policy.engine = StalledPushEngine(policy.engine, stall_at=2, on_stall=on_stall)
  try:
    with pytest.raises((SyncAborted, preemption.Stopped)) as stopped:
      trainer.run(STEPS)
  finally:
    trainer.close()
  return stopped.value


def test_a_stalled_push_saves_the_step_and_stops_in_one_line(tmp_path):
  ref = _trainer(tmp_path / "ref")
  try:
    ref.run(2)
    want = {n: jax.device_get(p.params) for n, p in ref.policies.items()}
  finally:
    ref.close()

  error = _stalled_run(tmp_path / "alone")
  assert type(error) is SyncAborted
  assert str(error) == (
      "toy_a: NCCL weight push: bucket 1 of 1 did not finish within 0.5 s "
      "(vllm.sync_timeout_s: the server never joined or stalled); the transfer was aborted; "
      "checkpoint 2 saved; the same command resumes")

  def term():
    os.kill(os.getpid(), signal.SIGTERM)
  stopped = _stalled_run(tmp_path / "term", on_stall=term)
  assert type(stopped) is preemption.Stopped
  assert str(stopped) == ("stopped by SIGTERM after step 2; checkpoint 2 saved; the same "
                          "command resumes")

  for run in ("alone", "term"):
    workdir = tmp_path / run
    assert [r["step"] for r in read_jsonl(workdir / "metrics.jsonl")] == [0, 1]
    assert (workdir / "checkpoints" / "2" / checkpoint.COMMIT_MARKER).exists()
    step, got = _saved_params(workdir)
    assert step == 2
    for name in want:
      for w, g in zip(jax.tree.leaves(want[name]), jax.tree.leaves(got[name])):
        np.testing.assert_array_equal(g, w, err_msg=f"{run}/{name}")
