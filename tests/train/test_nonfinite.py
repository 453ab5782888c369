"""A non-finite value never becomes state: injected into a gradient or a reward at a chosen
step, it stops the run before the step commits (no metrics row, checkpoint or export
of it), or with ``safety.nonfinite='skip'`` the update is skipped and counted."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from graft_jax.outputs import checkpoint, finite_guard
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train import methods
from graft_jax.train.methods.base import ClippedTokenLoss
from graft_jax.train.methods.grpo import Grpo
from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

pytestmark = pytest.mark.slow
NAN_STEP = 1  # 0-based: the second step


@dataclasses.dataclass(frozen=True)
class NanLoss(ClippedTokenLoss):
  """The clipped token loss times NaN: its gradient is NaN in every parameter."""

  def __call__(self, logp_BxT, batch, totals, update_index):
    value, metrics = super().__call__(logp_BxT, batch, totals, update_index)
    return value * jnp.nan, metrics


class NanAtStep(Grpo):
  """GRPO whose loss is `NanLoss` during step `NAN_STEP` (counted by its calls to
  ``build_rows``, once a step)."""
  name = "grpo_nan_at_step"

  def __init__(self, cfg):
    super().__init__(cfg)
    self.steps = 0

  def build_rows(self, policies, rolls, peers, key):
    self.steps += 1
    return super().build_rows(policies, rolls, peers, key)

  @property
  def loss_fn(self):
    loss = super().loss_fn
    return NanLoss(**dataclasses.asdict(loss)) if self.steps - 1 == NAN_STEP else loss


@pytest.fixture
def nan_method():
  methods.register(NanAtStep)
  yield NanAtStep.name
  del methods.REGISTRY[NanAtStep.name]


def _trainer(workdir, method="grpo", reward_fn=tiny_pair.contains_reward, **extra):
  cfg = dataclasses.replace(make_cfg("grpo", workdir, **extra), method=method)
  model_a = next(iter(tiny_pair.make_models().items()))
  return Trainer(cfg, tiny_pair.problems(), dict([model_a]), reward_fn=reward_fn)


def _finite(tree) -> bool:
  return all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(tree)
             if jnp.issubdtype(x.dtype, jnp.inexact))


def _checkpoints(t):
  """Every checkpoint of the run, restored: {step: state}."""
  with checkpoint.Checkpointer(t.cfg.checkpoint_dir, every_steps=1, keep=10) as ckpt:
    return {s: ckpt.restore(s, t._state())[0] for s in ckpt.steps()}


def test_a_nan_gradient_stops_the_run_before_the_step_commits(tmp_path, nan_method):
  t = _trainer(tmp_path, method=nan_method)
  with pytest.raises(finite_guard.NonFiniteError) as err:
    t.run(3)
  assert str(err.value).startswith(f"toy_a: non-finite loss at step {NAN_STEP + 1}; "
                                   f"the step was not committed")
  assert "\n" not in str(err.value)
  rows = read_jsonl(tmp_path / "metrics.jsonl")
  assert [r["step"] for r in rows] == list(range(NAN_STEP))
  assert all(np.isfinite(r[f"toy_a/update/{k}"]) for r in rows for k in ("loss", "grad_norm"))
  saved = _checkpoints(t)
  assert sorted(saved) == list(range(1, NAN_STEP + 1)) and all(map(_finite, saved.values()))
  t.close()  # launch/train.py exports only after run returns: no export either


def test_skip_mode_keeps_the_state_and_counts_the_updates(tmp_path, nan_method):
  t = _trainer(tmp_path, method=nan_method, **{"safety.nonfinite": "skip"})
  rows = t.run(3)
  assert [r["step"] for r in rows] == [0, 1, 2]
  assert [r["toy_a/update/skipped_nonfinite"] for r in rows] == [0, t.cfg.num_minibatches, 0]
  assert "toy_a/update/loss" not in rows[NAN_STEP]  # no update of the step ran to its end
  assert all(np.isfinite(r["toy_a/update/loss"]) for r in rows[::2])
  saved = _checkpoints(t)  # checkpoint k holds the state after k steps
  for x, y in zip(jax.tree.leaves(saved[NAN_STEP]), jax.tree.leaves(saved[NAN_STEP + 1])):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert all(map(_finite, saved.values()))
  t.export_hf(tmp_path / "hf")  # the trainer holds the finite state too
  t.close()
  exported = [load_file(f) for f in (tmp_path / "hf" / "toy_a").glob("*.safetensors")]
  assert exported and all(_finite(list(e.values())) for e in exported)


def test_a_nan_reward_stops_the_run_naming_model_step_and_nan(tmp_path):
  calls = []

  def reward(texts, golds):
    calls.append(1)
    rewards, stats = tiny_pair.contains_reward(texts, golds)
    if len(calls) == 2:
      rewards[3] = np.nan
    return rewards, stats

  t = _trainer(tmp_path, reward_fn=reward)
  with pytest.raises(finite_guard.NonFiniteError,
                     match=r"^toy_a: non-finite reward \(nan for row 3, 1 of \d+ rows\) "
                           r"at step 2; the step was not committed .*export\)$"):
    t.run(3)
  t.close()
  assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0]
  assert sorted(_checkpoints(t)) == [1]
