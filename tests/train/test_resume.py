"""A run killed after step k and resumed equals the run never interrupted."""

import jax
import numpy as np
import pytest

from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

pytestmark = pytest.mark.slow


def _run(workdir, steps, method):
  cfg = make_cfg(method, workdir)
  t = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(), reward_fn=tiny_pair.contains_reward)
  records = t.run(steps)
  params = {n: jax.tree.map(np.asarray, p.params) for n, p in t.policies.items()}
  t.close()
  return records, params


def test_killed_and_resumed_equals_uninterrupted(tmp_path):
  full, full_params = _run(tmp_path / "full", 3, "graft")
  _run(tmp_path / "cut", 2, "graft")  # "killed" after step 2; checkpoint at step 2
  resumed, resumed_params = _run(tmp_path / "cut", 3, "graft")
  assert [r["step"] for r in resumed] == [2]
  drop = lambda r: {k: v for k, v in r.items() if not k.startswith("time")
                       and not k.endswith("device_s")}  # wall time x devices
  assert drop(resumed[0]) == drop(full[2])
  for name in full_params:
    for x, y in zip(jax.tree.leaves(full_params[name]), jax.tree.leaves(resumed_params[name])):
      np.testing.assert_array_equal(x, y)
