"""The old-log-prob pass after row building (graft_jax.train.old_logprobs).

Only the own rows the update reads are scored (with a loss term, outside the first
minibatch when it reads its own forward); their values must equal a pass over every
row, the others keep the sampler's placeholders, and the sampler gap is over the
scored tokens.
"""

import jax
import numpy as np
import pytest

from configs import toy
from graft_jax.config import run_config as config_lib
from graft_jax.train import step as step_lib
from graft_jax.train.methods import make as make_method
from graft_jax.train.methods.hacpo import HacpoBatch
from graft_jax.train.old_logprobs import rows_to_score, score_own_rows
from graft_jax.train.policy import make_policy
from graft_jax.train.update_rows import KIND_SGT, Rows, typed_batch
from graft_jax.train.row_logprobs import score_rows
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
             old_logp=rng.normal(-5, 1, len(resp)), old_logp_pending=True)
  for i in range(2):
    resp = rng.integers(3, 200, 5).tolist()
    rows.add([5, 6, 7], resp, 3, adv=1.0, grafted=True, is_self=False,
             old_logp=np.full(5, -2.0))
  return rows


@pytest.mark.parametrize("method,overrides,first,want", [
    ("graft", {}, [], [1, 2, 4, 6, 10]),
    ("sgt", {}, [], [1, 2, 4, 6, 10, 11]),
    ("graft", {}, [0, 1, 2, 3], [4, 6, 10]),  # the first minibatch reads its own forward
    ("graft", {"ppo_epochs": 2}, [0, 1, 2, 3], [1, 2, 4, 6, 10]),  # ... not with 2 epochs
    ("graft", {"skip_silent_rows": False}, [], [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]),
    ("hacpo", {}, [], [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]),
])
def test_scores_exactly_the_rows_the_update_reads(method, overrides, first, want):
  # Silent: advantage 0 (0, 3, 5, 8), gate weight 0 (9), no tokens (7), SGT without
  # its term (11); rows 12 and 13 were never placeholders.
  cfg = config(method, **overrides)
  np.testing.assert_array_equal(rows_to_score(placeholder_rows(), make_method(cfg), first, cfg),
                                want)


def test_scored_rows_equal_a_pass_over_every_row(policy):
  rows, cfg = placeholder_rows(), config()
  before = [None if x is None else x.copy() for x in rows.old_logp]
  want = score_rows(policy.model, rows.prompt_ids, rows.response_ids, policy.pad_id,
                    length_cap=cfg.max_prompt_len + cfg.max_response_len)
  out = score_own_rows(policy, rows, make_method(cfg), [], cfg)
  scored = [1, 2, 4, 6, 10]
  assert out["old_logp_rows_scored"] == 5
  for i in range(len(rows)):
    if i in scored:
      np.testing.assert_allclose(rows.old_logp[i], want[i], rtol=1e-6, atol=1e-6)
      # HACPO's generator mean of an own row follows its old log-probs.
      hacpo_row = typed_batch(HacpoBatch, rows, [i], 0)
      np.testing.assert_allclose(hacpo_row.src_mean_logp[0], np.mean(want[i]), rtol=1e-6)
      assert not rows.old_logp_pending[i]
    else:  # silent placeholders and the grafted rows are untouched
      np.testing.assert_array_equal(rows.old_logp[i], before[i])
      assert rows.old_logp_pending[i] == (i < 12)
  gap = np.concatenate([np.abs(before[i] - want[i]) for i in scored])
  np.testing.assert_allclose(out["logp_mismatch_sum"], gap.sum(), rtol=1e-5)
  np.testing.assert_allclose(out["logp_mismatch_max"], gap.max(), rtol=1e-5)
  assert out["logp_mismatch_tokens"] == gap.size
  # Nothing left to score: no pass, and no gap.
  assert score_own_rows(policy, rows, make_method(cfg), [], cfg) == {
      "old_logp_rows_scored": 0, "logp_mismatch_sum": 0.0, "logp_mismatch_tokens": 0.0,
      "logp_mismatch_max": 0.0}


def test_no_placeholder_reaches_a_row_that_runs(monkeypatch):
  """A GRAFT step with two minibatches: every own row with a loss term reaches the
  update with its teacher-forced old log-probs, equal to the up-front pass's."""
  cfg = config()
  models = tiny_pair.make_models()
  policies = {name: make_policy(name, *models[key], cfg.optimizer, cfg.data.prompt_suffix)
              for name, key in (("toy_a", "a"), ("toy_b", "b"))}
  seen = {}
  real = step_lib.run_updates

  def capture(policy, rows, order, cfg_, method):
    seen[policy.name] = (rows, order, score_rows(
        policy.model, rows.prompt_ids, rows.response_ids, policy.pad_id,
        temperature=cfg_.rollout.temperature,
        length_cap=cfg_.max_prompt_len + cfg_.max_response_len))
    return real(policy, rows, order, cfg_, method)

  monkeypatch.setattr(step_lib, "run_updates", capture)
  data = tiny_pair.problems(8, seed=3)
  metrics, rolls = step_lib.train_step(cfg, policies, data, tiny_pair.contains_reward, 0,
                                       jax.random.key(0))
  scored = 0
  for name, (rows, order, want) in seen.items():
    assert rolls[name].old_logp_pending_B.all()
    assert len(rows_to_score(rows, make_method(cfg), order[0], cfg)) == 0  # none left
    for i in range(len(rows)):
      own = rows.extra[i].get("is_self", True) and not rows.grafted[i]  # grafted rows: scored as they are built
      if own and not rows.old_logp_pending[i] and rows.keep[i]:
        np.testing.assert_allclose(rows.old_logp[i], want[i], rtol=1e-5, atol=1e-5)
        scored += 1
  assert scored == sum(metrics[n]["old_logp_rows_scored"] for n in seen) > 0
