"""A scheduler's stop warning during a vLLM weight sync: nothing is lost.

SLURM's ``--signal`` (SIGUSR1 here, as launch/slurm/train_pair.sbatch asks for) reaches
every process of the job step: the trainer, and each vLLM server's process group. It
arrives while the trainer pushes step 0's new weights to the first server. The step's
parameters are already replaced, so it is finished: both servers keep serving, step 0
is saved with its row and the run stops. The same run, resumed, ends with the final
parameters (bitwise), rows and peer logs of an uninterrupted run with the same servers.
"""

import os
import signal

import jax
import numpy as np
import pytest

from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.rollout.vllm_engine import VLLMEngine
from graft_jax.rollout.vllm_sidecar import group_members
from graft_jax.outputs import peer_log
from graft_jax import preemption
from graft_jax.outputs import checkpoint
from graft_jax.train.setup import attach_engines
from graft_jax.train.trainer import Trainer
from tests.rollout.test_vllm_train import _cfg
from tests.train import tiny_pair

pytestmark = pytest.mark.slow

STEPS = 2
# Compared between runs; the rest of a row is timings and counters of the servers.
ROW_FIELDS = ("reward_mean", "logp_mismatch_max", "update/loss", "update/grad_norm")


def _trainer(workdir, vllm_pair):
  cfg = _cfg(workdir)
  models = {cfg.model_a.name: vllm_pair["a"][1:], cfg.model_b.name: vllm_pair["b"][1:]}
  trainer = Trainer(cfg, tiny_pair.problems(), models, reward_fn=tiny_pair.contains_reward)
  served = {cfg.model_a.name: vllm_pair["a"][0], cfg.model_b.name: vllm_pair["b"][0]}

  def reuse(name, model, tokenizer):  # the session's servers, given the run's weights
    served[name].set_weights(model)
    return served[name]
  attach_engines(trainer, reuse)
  return trainer


def _run(workdir, vllm_pair):
  trainer = _trainer(workdir, vllm_pair)
  try:
    trainer.run(STEPS)
    return {n: jax.device_get(p.params) for n, p in trainer.policies.items()}
  finally:
    trainer.close()


def _rows(workdir):
  return [{k: v for k, v in r.items() if k == "step" or k.endswith(ROW_FIELDS)}
          for r in read_jsonl(workdir / "metrics.jsonl")]


def _logs(workdir, names):
  """Each step's peer-log digest per model (the bytes, so NaN columns compare equal)."""
  return {(n, s): peer_log.PeerLogReader(workdir / "peer_logs", n).manifest(s)["sha256"]
          for n in names for s in range(STEPS)}


def test_the_stop_warning_during_a_weight_sync_loses_nothing(vllm_pair, tmp_path, monkeypatch):
  ref = _run(tmp_path / "ref", vllm_pair)

  groups = {k: e.sidecar.pgid() for k, (e, _, _) in vllm_pair.items()}
  members = {k: sorted(group_members(g)) for k, g in groups.items()}
  sync = VLLMEngine.set_weights
  calls = []

  def warned_sync(self, model):
    calls.append(self.name)
    if len(calls) == 3:  # the two attach syncs, then step 0's first push
      for g in groups.values():
        os.killpg(g, signal.SIGUSR1)
      os.kill(os.getpid(), signal.SIGUSR1)
    return sync(self, model)

  cut = tmp_path / "cut"
  monkeypatch.setattr(VLLMEngine, "set_weights", warned_sync)
  trainer = _trainer(cut, vllm_pair)
  try:
    with pytest.raises(preemption.Stopped) as stopped:
      trainer.run(STEPS)
  finally:
    trainer.close()
  monkeypatch.setattr(VLLMEngine, "set_weights", sync)
  assert len(calls) == 4  # the second model's push of step 0 still ran
  assert str(stopped.value) == ("stopped by SIGUSR1 after step 1; checkpoint 1 saved; "
                                "the same command resumes")
  assert [r["step"] for r in read_jsonl(cut / "metrics.jsonl")] == [0]
  assert (cut / "checkpoints" / "1" / checkpoint.COMMIT_MARKER).exists()
  # The servers ignored the warning: the same processes, in step with the trainer.
  assert {k: sorted(group_members(g)) for k, g in groups.items()} == members
  row = read_jsonl(cut / "metrics.jsonl")[0]
  for name in ("toy_a", "toy_b"):
    assert row[f"{name}/update/vllm_probe_max_abs"] < 1e-4

  got = _run(cut, vllm_pair)
  assert _rows(cut) == _rows(tmp_path / "ref")
  assert _logs(cut, ref) == _logs(tmp_path / "ref", ref)
  for name in ref:
    for want, have in zip(jax.tree.leaves(ref[name]), jax.tree.leaves(got[name])):
      np.testing.assert_array_equal(have, want, err_msg=name)
