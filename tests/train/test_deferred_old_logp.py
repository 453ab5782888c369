"""The old-log-prob pass after row building (graft_jax.train.deferred_old_logp).

Only the own rows with a loss term are scored; their values must equal what the
up-front pass over every row gives, the silent rows keep the sampler's
placeholders (and are never run), and the sampler gap is over the scored tokens.
"""

import jax
import numpy as np
import pytest

from configs import toy
from graft_jax.train import config as config_lib
from graft_jax.train import step as step_lib
from graft_jax.train.deferred_old_logp import rows_to_score, score_deferred
from graft_jax.train.methods import make as make_method
from graft_jax.train.policy import make_policy
from graft_jax.train.update_rows import KIND_SGT, Rows
from graft_jax.train.scoring import score_rows
from graft_jax.train.update import LossSpec
from tests.train import tiny_pair


def config(method="graft", **overrides):
  cd = toy.get_config(method)
  with cd.unlocked():
    cd.prompts_per_step, cd.n, cd.num_minibatches = 8, 4, 2
    cd.max_prompt_len, cd.max_response_len = 40, 16
    cd.hacpo.minibatch_prompts = 4
    for k, v in overrides.items():
      cd[k] = v
  return config_lib.from_config_dict(cd)


@pytest.fixture(scope="module")
def policy():
  model, tok = tiny_pair.make_models()["a"]
  cfg = config()
  return make_policy("toy_a", model, tok, cfg.optimizer, cfg.data.prompt_suffix)


def placeholder_rows(seed=0):
  """12 own rows with placeholders: advantages 0 or not, one gate weight 0, one
  empty response, one SGT row; and two rows scored already (grafted)."""
  rng = np.random.default_rng(seed)
  rows = Rows()
  adv = [0.0, 0.5, -0.5, 0.0, 1.0, 0.0, -1.0, 0.3, 0.0, 0.7, -0.2, 0.0]
  for i, a in enumerate(adv):
    resp = [] if i == 7 else rng.integers(3, 200, rng.integers(1, 12)).tolist()
    rows.add(rng.integers(3, 200, rng.integers(2, 9)).tolist(), resp, i // 4, adv=a,
             weight=0.0 if i == 9 else 1.0, kind=KIND_SGT if i == 11 else 0,
             old_logp=rng.normal(-5, 1, len(resp)), old_logp_deferred=True)
  for i in range(2):
    resp = rng.integers(3, 200, 5).tolist()
    rows.add([5, 6, 7], resp, 3, adv=1.0, grafted=True, is_self=False,
             old_logp=np.full(5, -2.0))
  return rows


@pytest.mark.parametrize("sgt_coef,want", [(0.0, [1, 2, 4, 6, 10]), (0.5, [1, 2, 4, 6, 10, 11])])
def test_scores_exactly_the_rows_with_a_loss_term(sgt_coef, want):
  # Silent: advantage 0 (0, 3, 5, 8), gate weight 0 (9), no tokens (7), SGT without
  # its term (11); rows 12 and 13 were never placeholders.
  np.testing.assert_array_equal(rows_to_score(placeholder_rows(), LossSpec(sgt_coef=sgt_coef)),
                                want)
  assert len(rows_to_score(placeholder_rows(), LossSpec(kind="hacpo"))) == 11  # all but 7


def test_scored_rows_equal_the_up_front_pass(policy):
  rows, cfg = placeholder_rows(), config()
  before = [None if x is None else x.copy() for x in rows.old_logp]
  want = score_rows(policy.model, rows.prompt_ids, rows.response_ids, policy.pad_id,
                    length_cap=cfg.max_prompt_len + cfg.max_response_len)
  out = score_deferred(policy, rows, LossSpec(), cfg)
  scored = [1, 2, 4, 6, 10]
  assert out["old_logp_rows_scored"] == 5 and out["old_logp_rows_silent"] == 7
  for i in range(len(rows)):
    if i in scored:
      np.testing.assert_allclose(rows.old_logp[i], want[i], rtol=1e-6, atol=1e-6)
      np.testing.assert_allclose(rows.src_mean_logp[i], np.mean(want[i]), rtol=1e-6)
      assert not rows.old_logp_deferred[i]
    else:  # silent placeholders and the grafted rows are untouched
      np.testing.assert_array_equal(rows.old_logp[i], before[i])
      assert rows.old_logp_deferred[i] == (i < 12)
  gap = np.concatenate([np.abs(before[i] - want[i]) for i in scored])
  np.testing.assert_allclose(out["logp_mismatch_mean"], gap.mean(), rtol=1e-5)
  np.testing.assert_allclose(out["logp_mismatch_max"], gap.max(), rtol=1e-5)
  # Nothing left to score: no pass; the gap reads 0 beside the count of 0.
  assert score_deferred(policy, rows, LossSpec(), cfg) == {
      "old_logp_rows_scored": 0, "old_logp_rows_silent": 7, "logp_mismatch_mean": 0.0,
      "logp_mismatch_max": 0.0}


@pytest.mark.parametrize("overrides,want", [
    ({}, True),
    ({"num_minibatches": 1, "ppo_epochs": 1}, False),  # the update's own forward instead
    ({"skip_silent_rows": False}, False),
    ({"pack_by_length": False}, False),
    ({"micro_batch_tokens": 0}, False),
    ({"old_logp_source": "sampler"}, False),
    ({"method": "hacpo"}, False),  # its loss reads every row's old mean
])
def test_only_where_silent_rows_never_run(overrides, want):
  cfg = config(overrides.pop("method", "graft"), **overrides)
  assert make_method(cfg).old_logp_deferred(cfg.prompts_per_step) is want


def test_no_placeholder_reaches_a_row_that_runs(monkeypatch):
  """A GRAFT step with two minibatches: every own row with a loss term reaches the
  update with its teacher-forced old log-probs, equal to the up-front pass's."""
  cfg = config()
  models = tiny_pair.make_models()
  policies = {name: make_policy(name, *models[key], cfg.optimizer, cfg.data.prompt_suffix)
              for name, key in (("toy_a", "a"), ("toy_b", "b"))}
  seen = {}
  real = step_lib.run_updates

  def capture(policy, rows, g, cfg_, key, method=None):
    seen[policy.name] = (rows, score_rows(policy.model, rows.prompt_ids, rows.response_ids,
                                          policy.pad_id, temperature=cfg_.rollout.temperature,
                                          length_cap=cfg_.max_prompt_len + cfg_.max_response_len))
    return real(policy, rows, g, cfg_, key, method)

  monkeypatch.setattr(step_lib, "run_updates", capture)
  data = tiny_pair.problems(8, seed=3)
  metrics, rolls = step_lib.train_step(cfg, policies, data, tiny_pair.contains_reward, 0,
                                       jax.random.key(0))
  spec = make_method(cfg).loss(cfg.prompts_per_step)
  scored = 0
  for name, (rows, want) in seen.items():
    assert rolls[name].old_logp_deferred
    assert len(rows_to_score(rows, spec)) == 0  # none left
    for i in range(len(rows)):
      if rows.is_self[i] and not rows.old_logp_deferred[i] and rows.keep[i]:
        np.testing.assert_allclose(rows.old_logp[i], want[i], rtol=1e-5, atol=1e-5)
        scored += 1
    assert metrics[name]["old_logp_rows_scored"] + metrics[name]["old_logp_rows_silent"] == \
        sum(rows.is_self)
  assert scored == sum(metrics[n]["old_logp_rows_scored"] for n in seen) > 0
