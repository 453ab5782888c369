"""The update owns pi_old: a loss that reads ``batch.old_logp`` as it is gets the same
gradient when the first minibatch's own rows still hold the sampler's log-probs as
when every row was scored up front (one ``jax.grad`` of the loss written out here)."""

import dataclasses
import types
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.models import init_model, token_logprobs
from graft_jax.outputs import metric_kinds as kinds
from graft_jax.train.methods.base import PpoBatch
from graft_jax.train.old_logprobs import fresh_rows
from graft_jax.train.update_rows import typed_batch
from tests.train.test_update import CFG, WIDTH, assert_same_gradient, graft_rows, packed


@dataclasses.dataclass(frozen=True)
class NaiveRatioLoss:
  """-mean over tokens of A * pi / pi_old, reading ``batch.old_logp`` with no guard."""

  Batch: ClassVar[type] = PpoBatch
  temperature: float = 1.0

  def __call__(self, logp_BxT, batch, totals, update_index):
    del update_index
    ratio_BxT = jnp.exp(logp_BxT - batch.old_logp)
    loss = -(ratio_BxT * batch.adv[:, None] * batch.resp_mask).sum() / totals["num_tokens"]
    return loss, kinds.metrics(kinds.MEAN, pg_loss=loss)

  def has_signal(self, batch):
    return np.ones(len(batch.ids), bool)

  def totals(self, batch):
    return {"num_tokens": np.float32(np.asarray(batch.resp_mask).sum())}

  def units(self, batch):
    return np.asarray(batch.resp_mask, np.float32).sum(axis=1)


def test_a_naive_loss_reads_a_true_old_policy():
  rows = graft_rows(np.random.default_rng(3))  # old_logp: uniform(3, 5) noise on every row
  rows.old_logp_pending = [not g for g in rows.grafted]  # own rows: the sampler's stand-ins
  cfg = types.SimpleNamespace(old_logp_source="teacher_forced", ppo_epochs=1)
  fresh_B = fresh_rows(rows, range(len(rows)), 0, cfg)
  assert fresh_B.sum() == 8 and not fresh_rows(rows, range(len(rows)), 1, cfg).any()
  loss = NaiveRatioLoss()
  got, _ = packed(loss, rows, 96, fresh_B=fresh_B)

  # Every own row scored up front under the same parameters, then one plain jax.grad.
  graphdef, params = nnx.split(init_model(CFG, rngs=nnx.Rngs(1)))
  batch = typed_batch(PpoBatch, rows, range(len(rows)), 0, multiple=WIDTH)
  logp = token_logprobs(nnx.merge(graphdef, params), batch.ids, batch.attn)
  scored = np.where(fresh_B[:, None], np.asarray(logp), np.asarray(batch.old_logp))
  batch = batch.replace(old_logp=scored * np.asarray(batch.resp_mask))
  n = np.asarray(batch.resp_mask).sum()

  def up_front(p):
    logp_BxT = token_logprobs(nnx.merge(graphdef, p), batch.ids, batch.attn)
    ratio = jnp.exp(logp_BxT - batch.old_logp)
    return -(ratio * batch.adv[:, None] * batch.resp_mask).sum() / n

  assert_same_gradient(got, jax.grad(up_front)(params))
  # Reading the sampler's stand-ins instead would have been a different gradient.
  naive, _ = packed(loss, rows, 96)
  scale = max(float(np.abs(np.asarray(g)).max()) for g in jax.tree.leaves(got))
  assert max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
             for a, b in zip(jax.tree.leaves(naive), jax.tree.leaves(got))) > 0.01 * scale
