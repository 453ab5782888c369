"""The update on packed rows: the gradient of the unpacked minibatch (one unsplit
``jax.grad``), its loss against float64 NumPy, over random length sets, and at most
two gradient programs whatever the lengths."""

import jax
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings, strategies as st

from graft_jax.models import init_model
from graft_jax.train import packed_micro_batches, update
from graft_jax.train.methods.base import ClippedTokenLoss
from graft_jax.train.methods.hacpo import HacpoLoss
from graft_jax.outputs.step_metrics import one_update
from graft_jax.train.update_rows import Rows, typed_batch
from tests.core import reference
from tests.train.test_update import (CFG, WIDTH, GradientInState, assert_same_gradient,
                                     graft_rows, policy_for, unsplit)


def packed_update(loss, rows, budget, policy=None):
  """(the packed update's gradient, its metrics, the policy) on all of ``rows``."""
  graphdef, params = nnx.split(init_model(CFG, rngs=nnx.Rngs(1)))
  tx = GradientInState()
  policy = policy or policy_for(graphdef, tx)
  batch = typed_batch(loss.Batch, rows, range(len(rows)), 0, multiple=WIDTH)
  _, grads, parts = update.update(policy, params, tx.init(params), batch, loss, np.int32(1),
                                  micro_batch_tokens=budget, width=WIDTH, skip_silent=False,
                                  packed=True)
  return grads, one_update(jax.device_get(parts)), policy


def check_against_unsplit(loss, rows, budget):
  want_loss, want, logp, batch = unsplit(loss, rows)
  got, metrics, _ = packed_update(loss, rows, budget)
  np.testing.assert_allclose(metrics["loss"], want_loss, rtol=1e-5)
  assert_same_gradient(got, want)
  # The padding metric: computed tokens are whole packed rows, the real ones the rows'.
  assert metrics["computed_tokens"] % WIDTH == 0
  assert metrics["computed_tokens"] - metrics["padding_tokens"] == np.asarray(batch.attn).sum()
  if isinstance(loss, ClippedTokenLoss) and not loss.sgt_coef:  # float64 NumPy
    mask = np.asarray(batch.resp_mask) * np.asarray(batch.ppo)[:, None]
    want64 = reference.token_loss(logp, batch.old_logp, batch.adv, batch.weight, mask,
                                  sequence=loss.ratio_level == "sequence")
    np.testing.assert_allclose(metrics["loss"], want64, rtol=1e-5)


@pytest.mark.parametrize("loss,budget,sgt", [
    (ClippedTokenLoss(), 128, False),  # one packed row of 128 per micro-batch
    (ClippedTokenLoss(ratio_level="sequence"), 256, False),
    (ClippedTokenLoss(sgt_coef=0.1), 128, True),
    (HacpoLoss(kl_coef=1e-3), 128, False),
    (ClippedTokenLoss(), 0, False),  # no budget: one micro-batch
], ids=["graft-128", "sequence-256", "sgt-128", "hacpo-128", "whole"])
def test_packed_gradient_equals_the_unpacked_one(loss, budget, sgt):
  check_against_unsplit(loss, graft_rows(np.random.default_rng(0), sgt), budget)


@settings(max_examples=4, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 100)), min_size=2, max_size=10),
       st.sampled_from([128, 256]))
def test_packed_gradient_over_random_length_sets(lengths, budget):
  rng = np.random.default_rng(len(lengths))
  rows = Rows()
  for j, (p, r) in enumerate(lengths):
    rows.add(rng.integers(1, 61, p).tolist(), rng.integers(1, 61, r).tolist(), j // 2,
             adv=rng.normal(), old_logp=-rng.uniform(3, 5, r))
  check_against_unsplit(ClippedTokenLoss(), rows, budget)


def test_at_most_two_gradient_programs_whatever_the_lengths():
  loss = ClippedTokenLoss()
  policy = None
  for seed in range(4):
    rows = graft_rows(np.random.default_rng(seed), max_response=[20, 60, 110, 120][seed])
    _, _, policy = packed_update(loss, rows, 256, policy)
  grad_fn = update.programs(policy, loss)[0]
  assert grad_fn._cache_size() <= 2


def test_run_shapes_are_the_row_and_the_long_row():
  assert packed_micro_batches.run_shapes(16, 128, 128, 256) == [(8, 2, 128)]
  assert packed_micro_batches.run_shapes(16, 128, 192, 256) == [(8, 2, 128), (16, 1, 256)]
