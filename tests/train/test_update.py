"""The update: packed micro-batches give the whole minibatch's loss (against a float64 NumPy
loss) and gradient (against one unsplit ``jax.grad``), silent rows change nothing, the
first minibatch's old log-probs may come from its own forward, and a second update
compiles nothing."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from graft_jax import backends
from graft_jax.models import ModelConfig, init_model, token_logprobs
from graft_jax.train import update
from graft_jax.train.methods.base import ClippedTokenLoss
from graft_jax.train.methods.hacpo import HacpoLoss
from graft_jax.train.update_rows import KIND_SGT, Rows, typed_batch
from tests.core import reference

N = 4  # rows per group
CFG = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=32, intermediate_size=48,
                  num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, qk_norm=True)
WIDTH = 128  # the run's length budget (buckets of 64 and 128 tokens): every row fits


def graft_rows(rng, sgt=False, max_response=60):
  """Two own groups, two grafted ones (gate weights < 1, one response dropped), ragged lengths."""
  rows = Rows()
  for g in range(4):
    grafted = g >= 2
    adv = rng.normal(size=N)
    for j in range(N):
      prompt = rng.integers(1, 61, rng.integers(3, 9)).tolist()
      resp = rng.integers(1, 61, rng.integers(2, max_response)).tolist()
      kind = KIND_SGT if (sgt and g == 3 and j == 0) else 0
      rows.add(prompt, resp, g, adv=adv[j], weight=rng.uniform(0.8, 1.0) if grafted else 1.0,
               keep=not (g == 3 and j == 2), grafted=grafted, kind=kind, is_self=not grafted,
               src_mean_logp=-rng.uniform(2, 5), cap_ratio=rng.uniform(0.5, 2),
               old_logp=-rng.uniform(3, 5, len(resp)))
      rows.ref_logp[-1] = -rng.uniform(3, 5, len(resp)).astype(np.float32)
  return rows


class GradientInState(optax.GradientTransformation):
  """An "optimizer" whose state is the last gradient and whose step changes nothing:
  the update's accumulated gradient, read back exactly."""

  def __new__(cls):
    return super().__new__(cls, lambda p: jax.tree.map(jnp.zeros_like, p),
                           lambda g, s, p=None: (jax.tree.map(jnp.zeros_like, g), g))


def policy_for(graphdef, tx):
  return types.SimpleNamespace(graphdef=graphdef, tx=tx, mesh=None, param_sharding=None,
                               opt_sharding=None, compiled={})


def packed(loss, rows, budget, *, skip_silent=False, fresh_B=None, policy=None):
  """(the packed update's gradient, its combined metrics) on all of ``rows``."""
  graphdef, params = nnx.split(init_model(CFG, rngs=nnx.Rngs(1)))
  tx = GradientInState()
  policy = policy or policy_for(graphdef, tx)
  batch = typed_batch(loss.Batch, rows, range(len(rows)), 0, multiple=WIDTH)
  _, grads, parts = update.update(policy, params, tx.init(params), batch, loss, np.int32(1),
                                  micro_batch_tokens=budget, width=WIDTH,
                                  skip_silent=skip_silent, fresh_B=fresh_B)
  from graft_jax.outputs.step_metrics import one_update
  return grads, one_update(jax.device_get(parts))


def unsplit(loss, rows, old_logp=None):
  """(loss, gradient, logp_BxT) of the whole minibatch in one ``jax.grad``."""
  graphdef, params = nnx.split(init_model(CFG, rngs=nnx.Rngs(1)))
  batch = typed_batch(loss.Batch, rows, range(len(rows)), 0, multiple=WIDTH)
  if old_logp is not None:
    batch = batch.replace(old_logp=old_logp)
  totals, fresh_B = loss.totals(batch), np.zeros(len(rows), np.float32)
  (value, _), grads = jax.jit(jax.value_and_grad(
      lambda p: update.loss_and_metrics(p, (batch, fresh_B), totals, 1, graphdef=graphdef,
                                        loss=loss),
      has_aux=True))(params)
  logp = token_logprobs(nnx.merge(graphdef, params), batch.ids, batch.attn,
                        temperature=loss.temperature)
  return float(value), grads, np.asarray(logp), batch


def assert_same_gradient(got, want):
  scale = max(float(np.abs(w).max()) for w in jax.tree.leaves(want))
  assert scale > 1e-4  # a real gradient, not zeros
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("loss,budget,sgt", [
    (ClippedTokenLoss(), 96, False),  # micro-batches of 3 and 1 rows cut through groups
    (ClippedTokenLoss(), 200, False),
    (ClippedTokenLoss(ratio_level="sequence"), 150, False),
    (ClippedTokenLoss(sgt_coef=0.1), 96, True),
    (HacpoLoss(kl_coef=1e-3), 96, False),
    (ClippedTokenLoss(), 0, False),  # no budget: one micro-batch
], ids=["graft-96", "graft-200", "sequence-150", "sgt-96", "hacpo-96", "whole"])
def test_packed_gradient_equals_the_unsplit_one(loss, budget, sgt):
  rows = graft_rows(np.random.default_rng(0), sgt)
  want_loss, want, logp, batch = unsplit(loss, rows)
  got, metrics = packed(loss, rows, budget)
  # Cutting a row to a shorter padded length changes XLA's shapes and so its rounding:
  # a row's log-probs at T = 64 and T = 128 differ by up to one ulp, which moves the
  # loss by a few 1e-7 of its value.
  np.testing.assert_allclose(metrics["loss"], want_loss, rtol=1e-5)
  assert_same_gradient(got, want)
  if isinstance(loss, ClippedTokenLoss):  # the loss itself, in float64 NumPy
    mask = np.asarray(batch.resp_mask) * np.asarray(batch.ppo)[:, None]
    want64 = reference.token_loss(logp, batch.old_logp, batch.adv, batch.weight, mask,
                                  sequence=loss.ratio_level == "sequence")
    if loss.sgt_coef:
      sgt_mask = np.asarray(batch.resp_mask) * np.asarray(batch.sgt)[:, None]
      want64 -= loss.sgt_coef * (logp * sgt_mask).astype(np.float64).sum() / sgt_mask.sum()
    np.testing.assert_allclose(metrics["loss"], want64, rtol=1e-5)


def silence(rows, groups=(0,), zero_weight_row=None):
  """``rows`` with the given groups' advantages set to 0 (all-fail / all-pass) and,
  optionally, one row's gate weight set to 0."""
  for r, g in enumerate(rows.group):
    if g in groups:
      rows.adv[r] = 0.0
  if zero_weight_row is not None:
    rows.weight[zero_weight_row] = 0.0
  return rows


@pytest.mark.parametrize("loss,sgt", [(ClippedTokenLoss(), False),
                                      (ClippedTokenLoss(sgt_coef=0.1), True)],
                         ids=["clipped", "sgt"])
def test_leaving_silent_rows_out_changes_neither_gradient_nor_loss(loss, sgt):
  rows = silence(graft_rows(np.random.default_rng(0), sgt), groups=(0, 3), zero_weight_row=9)
  batch = typed_batch(loss.Batch, rows, range(len(rows)), 0, multiple=WIDTH)
  silent = (np.asarray(batch.resp_mask).sum(1) > 0) & ~loss.has_signal(batch)
  assert silent.sum() == 4 + 1 + (2 if sgt else 3)  # group 0, row 9, group 3 but its dropped row (and SGT row)
  everything, m_all = packed(loss, rows, 96)
  got, m = packed(loss, rows, 96, skip_silent=True)
  assert_same_gradient(got, everything)
  np.testing.assert_allclose(m["loss"], m_all["loss"], rtol=1e-6)
  assert m["silent_rows"] == silent.sum() and m["rows_run"] == 15 - silent.sum()


def test_with_every_row_silent_only_the_optimizer_step_runs():
  rows = silence(graft_rows(np.random.default_rng(0)), groups=(0, 1, 2, 3))
  grads, m = packed(ClippedTokenLoss(), rows, 96, skip_silent=True)
  assert all(not np.asarray(g).any() for g in jax.tree.leaves(grads))
  assert m["rows_run"] == 0 and m["pg_loss"] == 0 and m["ratio_mean"] == 0


def test_old_logprobs_from_the_update_equal_the_teacher_forced_ones():
  """The ``fresh_B`` rows' old log-probs (here noise standing in for the sampler's) are
  replaced by the stop-gradient of the update's own forward: the same gradient as
  with the teacher-forced ones, the other rows' kept, and the gap to the noise
  measured over the fresh rows."""
  loss = ClippedTokenLoss()
  rows = graft_rows(np.random.default_rng(0))
  _, _, logp, batch = unsplit(loss, rows)
  own_B = 1 - np.asarray(batch.grafted)
  teacher_forced = np.where(own_B[:, None] > 0, logp, np.asarray(batch.old_logp))
  _, want, _, _ = unsplit(loss, rows, old_logp=teacher_forced * np.asarray(batch.resp_mask))
  got, m = packed(loss, rows, 96, fresh_B=own_B)  # old_logp: uniform(3, 5) noise
  assert_same_gradient(got, want)
  own = np.asarray(batch.resp_mask) * own_B[:, None]
  gap = np.abs(logp - np.asarray(batch.old_logp)) * own
  np.testing.assert_allclose(m["logp_mismatch_sum"], gap.sum(), rtol=1e-5)
  np.testing.assert_allclose(m["logp_mismatch_max"], gap.max(), rtol=1e-6)
  assert m["logp_mismatch_tokens"] == own.sum()


def test_the_second_update_compiles_nothing():
  """Every shape the run can take compiles on the first update, whichever lengths it
  has (here only short rows); longer rows later compile nothing new. A count of
  backend compilations, not a timing."""
  from jax import monitoring
  graphdef, params = nnx.split(init_model(CFG, rngs=nnx.Rngs(1)))
  tx = optax.sgd(1e-3)
  policy, opt, loss = policy_for(graphdef, tx), tx.init(params), ClippedTokenLoss()
  short = graft_rows(np.random.default_rng(1), max_response=8)
  long = graft_rows(np.random.default_rng(2), max_response=110)
  count = []
  listener = lambda event, *a, **k: count.append(event) if event.endswith("backend_compile_duration") else None
  monitoring.register_event_duration_secs_listener(listener)
  try:
    per_update = []
    for rows in (short, long, short):
      before = len(count)
      batch = typed_batch(loss.Batch, rows, range(len(rows)), 0, multiple=WIDTH)
      params, opt, _ = update.update(policy, params, opt, batch, loss, np.int32(0),
                                     micro_batch_tokens=96, width=WIDTH)
      jax.block_until_ready(params)
      per_update.append(len(count) - before)
  finally:
    monitoring.unregister_event_duration_listener(listener)
  assert per_update[0] > 0 and per_update[1:] == [0, 0]


def test_the_micro_batch_budget_is_the_configs_or_the_backends():
  assert update.micro_batch_budget(1536) == 1536
  want = update.CPU_MICRO_BATCH_TOKENS if jax.default_backend() == "cpu" else 0
  assert update.micro_batch_budget(0) == want


@pytest.mark.parametrize("target,want", [("cpu", update.CPU_MICRO_BATCH_TOKENS), ("gpu", 0),
                                         ("tpu", 0)])
def test_the_micro_batch_budget_is_the_targets(target, want):
  """Planned or lowered for another backend (`backends.traced_for`), the budget is that
  backend's, whatever this machine is: a GPU run planned on a CPU splits nothing."""
  for lowering in (False, True):
    with backends.traced_for(target, lowering=lowering):
      assert update.micro_batch_budget(0) == want
      assert update.micro_batch_budget(1536) == 1536
