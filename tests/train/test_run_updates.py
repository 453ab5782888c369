"""``run_updates``: minibatches of whole groups in the method's order, and how metrics add up.

Each call of the compiled update is recorded (and passed through), so the
order, the update indices and the aggregation are checked against what the
updates themselves returned.
"""

import jax
import numpy as np
import pytest

from graft_jax.train import methods, update
from graft_jax.train.step import minibatches, run_updates as run_order
from graft_jax.outputs.step_metrics import one_update
from graft_jax.train.update_rows import Rows
from tests.train.methods import helpers

GRAFTED = (1, 3)  # groups holding grafted rows


def rows_by_group():
  """G groups of N rows; a row's advantage tells its group: +-(q + 0.1 (j + 1))."""
  rng = np.random.default_rng(0)
  rows = Rows()
  for q in range(helpers.G):
    for j in range(helpers.N):
      resp = rng.integers(3, 200, int(rng.integers(2, 6))).tolist()
      rows.add([5, 6, 7], resp, q, adv=(q + 0.1 * (j + 1)) * (-1) ** j, weight=0.9 if q in GRAFTED else 1.0,
               grafted=q in GRAFTED, old_logp=-rng.uniform(3, 5, len(resp)))
  return rows


@pytest.fixture
def recorded(monkeypatch):
  calls = []
  real = update.update

  def spy(policy, params, opt_state, batch, loss, update_index, **kw):
    params, opt_state, parts = real(policy, params, opt_state, batch, loss, update_index, **kw)
    calls.append(dict(groups=sorted(set(np.floor(np.abs(batch.adv)).astype(int).tolist())),
                      index=int(update_index), loss=loss,
                      metrics=one_update(jax.device_get(parts))))
    return params, opt_state, parts

  monkeypatch.setattr(update, "update", spy)
  return calls


def run_updates(policy, rows, g, cfg, key, method):
  """The step's updates: its minibatches in the method's order, then ``run_updates``."""
  return run_order(policy, rows, minibatches(rows, g, method, cfg.ppo_epochs, key), cfg, method)


@pytest.mark.parametrize("order,first,second", [("peer_last", [0, 2], [1, 3]),
                                                ("peer_first", [1, 3], [0, 2])])
def test_grafted_groups_go_where_the_order_says(recorded, order, first, second):
  cfg = helpers.config("graft", **{"graft.order": order, "ppo_epochs": 2})
  policy = helpers.policies(cfg)["toy_a"]
  before = jax.device_get(policy.params)
  out = run_updates(policy, rows_by_group(), helpers.G, cfg, jax.random.key(0),
                    methods.make(cfg))
  assert [c["groups"] for c in recorded] == [first, second] * 2
  assert [c["index"] for c in recorded] == [0, 1, 2, 3]  # counts across epochs
  assert out["minibatch_updates"] == 4
  changed = jax.tree.map(lambda a, b: not np.array_equal(a, b), before,
                         jax.device_get(policy.params))
  assert any(jax.tree.leaves(changed))  # the policy holds the updated parameters


def test_metrics_are_means_over_updates_and_clip_fractions_pool_tokens(recorded):
  cfg = helpers.config("graft", **{"optimizer.lr": 0.05})  # large steps: the clip engages
  policy = helpers.policies(cfg)["toy_a"]
  out = run_updates(policy, rows_by_group(), helpers.G, cfg, jax.random.key(1),
                    methods.make(cfg))
  per = [c["metrics"] for c in recorded]
  assert len(per) == 2
  for k in ("loss", "pg_loss", "grad_norm", "ratio_mean", "clip_frac_high"):
    assert out[k] == pytest.approx(np.mean([float(m[k]) for m in per]), rel=1e-6)
  # The old log-probs are not the policy's: ratios sit far from 1, so the clip counts are real.
  assert sum(float(m["own_clipped"]) + float(m["graft_clipped"]) for m in per) > 0
  own = sum(float(m["own_clipped"]) for m in per) / sum(float(m["own_tokens"]) for m in per)
  graft = sum(float(m["graft_clipped"]) for m in per) / sum(float(m["graft_tokens"]) for m in per)
  assert out["clip_frac_own"] == pytest.approx(own) and out["clip_frac_graft"] == pytest.approx(graft)
  assert "own_tokens" not in out and "graft_clipped" not in out


def test_hacpo_uses_its_minibatch_count_and_loss(recorded):
  cfg = helpers.config("hacpo", **{"hacpo.minibatch_prompts": 1})
  policy = helpers.policies(cfg)["toy_a"]
  rows = rows_by_group()
  rows.ref_logp = [np.zeros(len(r), np.float32) for r in rows.response_ids]
  method = methods.make(cfg)
  out = run_updates(policy, rows, helpers.G, cfg, jax.random.key(0), method)
  assert out["minibatch_updates"] == helpers.G  # one prompt per minibatch
  assert all(c["loss"] == method.loss_fn for c in recorded)
  assert [len(c["groups"]) for c in recorded] == [1] * helpers.G


def test_silent_rows_are_counted_and_left_out_of_the_fractions(recorded):
  # Two minibatches of groups {0, 2} and {1, 3} (peer_last); group 0 and 2 all-fail:
  # the first minibatch runs no row, the second runs all of its rows.
  cfg = helpers.config("graft", **{"perf.micro_batch_tokens": 64, "graft.order": "peer_last"})
  policy = helpers.policies(cfg)["toy_a"]
  rows = rows_by_group()
  for r, q in enumerate(rows.group):
    if q in (0, 2):
      rows.adv[r] = 0.0
  out = run_updates(policy, rows, helpers.G, cfg, jax.random.key(0), methods.make(cfg))
  per = [c["metrics"] for c in recorded]
  assert [float(m["rows_run"]) for m in per] == [0, 2 * helpers.N]
  assert out["silent_rows"] == 2 * helpers.N and out["rows_run"] == 2 * helpers.N
  assert out["ratio_mean"] == pytest.approx(float(per[1]["ratio_mean"]), rel=1e-6)
  assert out["loss"] == pytest.approx(np.mean([float(m["loss"]) for m in per]), rel=1e-6)
  assert float(per[0]["loss"]) == 0.0  # no micro-batch ran: only the optimizer step
