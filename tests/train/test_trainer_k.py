"""A two-step GRAFT run of three tiny models: per-pair metrics recomputed from its peer logs,
then a resume from its checkpoint."""

import dataclasses

import jax
import numpy as np
import pytest

from configs import base
from graft_jax.config import run_config as config_lib
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train.trainer import Trainer
from tests.core.test_exchange_k import exchange_k_reference
from tests.train import tiny_pair
from tests.train.test_trainer_methods import N, logged_counts, make_cfg

pytestmark = pytest.mark.slow  # two steps of three tiny models (about a minute on 2 cores)
NAMES = ("toy_a", "toy_b", "toy_c")


def cfg_of(workdir):
  """The tiny pair run's config (``make_cfg``) with three models."""
  cd = config_lib.config_dict()
  cd.update(config_lib.to_dict(make_cfg("graft", workdir)))
  base.set_models(cd, [("", name) for name in NAMES])
  return config_lib.from_config_dict(cd)


def trainer(cfg):
  models = tiny_pair.make_trio()
  return Trainer(cfg, tiny_pair.problems(), {k: models[k] for k in "abc"},
                 reward_fn=tiny_pair.contains_reward)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("trio")
  cfg = cfg_of(workdir)
  t = trainer(cfg)
  t.run(2)
  params = {n: jax.device_get(p.params) for n, p in t.policies.items()}
  t.close()
  return workdir, cfg, params, {r["step"]: r for r in read_jsonl(workdir / "metrics.jsonl")}


def test_per_pair_metrics_match_the_logs(run):
  workdir, cfg, _, metrics = run
  grafted = 0
  for step in range(2):
    k_MxG = np.stack([logged_counts(workdir, name, step)[1] for name in NAMES])
    source_MxG = exchange_k_reference(k_MxG, N)
    chosen_MxG = exchange_k_reference(k_MxG, N, balance=False)
    rec = metrics[step]
    for r, recv in enumerate(NAMES):
      assert rec[f"{recv}/exchange/grafted_groups"] == (source_MxG[r] >= 0).sum()
      for p, src in enumerate(NAMES):
        if p == r:
          continue
        key = f"{recv}/exchange/from/{src}"
        cand = ((k_MxG[r] == 0) & (k_MxG[p] >= 1) & (k_MxG[p] <= N - 1)).sum()
        assert rec[f"{key}/candidates"] == cand
        assert rec[f"{key}/chosen"] == (chosen_MxG[r] == p).sum()
        assert rec[f"{key}/grafted_groups"] == (source_MxG[r] == p).sum()
        assert rec[f"{key}/peer_offered"] == N * (source_MxG[r] == p).sum()
        assert rec[f"{key}/admitted"] <= rec[f"{key}/peer_offered"]
        if p > r:
          assert rec[f"m/{recv}/{src}"] == min((chosen_MxG[r] == p).sum(),
                                               (chosen_MxG[p] == r).sum())
      grafted += (source_MxG[r] >= 0).sum()
  assert grafted > 0  # the checks above were not vacuous


def test_resume_restores_three_policies(run):
  workdir, cfg, params, _ = run
  t = trainer(cfg)
  assert t.step == 2 and list(t.policies) == list(NAMES)
  assert t.stream.position == 2
  for name, p in t.policies.items():
    for want, got in zip(jax.tree.leaves(params[name]), jax.tree.leaves(p.params)):
      np.testing.assert_array_equal(np.asarray(want), np.asarray(got))
  # Beside the run: resume=False refuses a workdir holding one (outputs.workdir_runs).
  fresh = trainer(dataclasses.replace(cfg, workdir=str(workdir.with_name(workdir.name + "-fresh")),
                                      checkpoint=dataclasses.replace(cfg.checkpoint, resume=False)))
  assert fresh.step == 0 and not all(  # the restore above was not vacuous
      np.array_equal(a, np.asarray(b)) for a, b in zip(
          jax.tree.leaves(params["toy_c"]), jax.tree.leaves(fresh.policies["toy_c"].params)))
  t.close()
  fresh.close()
