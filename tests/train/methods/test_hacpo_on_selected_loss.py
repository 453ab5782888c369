"""HACPO on GRAFT's prompts: HACPO's loss on the selected prompts' rows, GRPO's elsewhere.

Four rows of two tokens: rows 0 and 1 are own rows of an unselected prompt
(GRPO's clipped token loss, a token mean over their 4 tokens), rows 2 (self)
and 3 (cross, capability ratio 0.5) a selected prompt's (HACPO's sequence loss
over its 2 rows, plus 0.1 x the low-variance KL to the reference over them).
Each term is worked independently: GRPO's by tests.core.reference.token_loss in
float64, HACPO's by hand as in tests/core/test_hacpo.py.
"""

import math

import jax.numpy as jnp
import numpy as np

from graft_jax.train.methods.base import ClippedTokenLoss
from graft_jax.train.methods.hacpo import HacpoGrpoBatch, HacpoLoss, HacpoOnSelectedLoss
from tests.core import reference

LOGP = np.array([[-1.0, -2.0], [-0.5, -1.5], [-0.9, -0.9], [-1.5, -1.5]], np.float32)
OLD = np.array([[-1.1, -1.6], [-0.5, -1.0], [0, 0], [0, 0]], np.float32)
REF = np.array([[0, 0], [0, 0], [-1.0, -0.7], [-1.5, -1.2]], np.float32)
ADV = np.array([1.0, -0.5, 1.0, 2.0], np.float32)
PPO = np.array([1, 1, 0, 0], np.float32)


def batch(adv=ADV):
  return HacpoGrpoBatch(
      ids=jnp.zeros((4, 2), jnp.int32), attn=jnp.ones((4, 2), bool),
      resp_mask=jnp.ones((4, 2)), old_logp=jnp.asarray(OLD), ref_logp=jnp.asarray(REF),
      adv=jnp.asarray(adv), weight=jnp.ones(4), grafted=jnp.asarray([0.0, 0.0, 0.0, 1.0]),
      ppo=jnp.asarray(PPO), is_self=jnp.asarray([True, True, True, False]),
      src_mean_logp=jnp.asarray([0.0, 0.0, -1.0, -1.0]), cap_ratio=jnp.asarray([1, 1, 1, 0.5]))


def test_each_term_over_its_own_rows():
  loss = HacpoOnSelectedLoss(hacpo=HacpoLoss(kl_coef=0.1), grpo=ClippedTokenLoss())
  b = batch()
  totals = {k: jnp.float32(v) for k, v in loss.totals(b).items()}
  assert (float(totals["num_tokens"]), float(totals["num_rows"])) == (4.0, 2.0)
  value, metrics = loss(jnp.asarray(LOGP), b, totals, 0)
  grpo = reference.token_loss(LOGP[:2], OLD[:2], ADV[:2], np.ones(2), np.ones((2, 2)))
  # Row 2: s = e^{0.1}, clipped to 1 + 4e-4 (A > 0); row 3: s = e^{-0.5} -> 0.8, 0.8 * 0.8 * c A.
  hacpo = -((1 + 4e-4) * 1.0 + 0.8 * 0.8 * 0.5 * 2.0) / 2
  d = REF[2:].astype(np.float64) - LOGP[2:]
  kl = np.mean((np.exp(d) - d - 1).mean(axis=1))
  np.testing.assert_allclose(float(value), grpo + hacpo + 0.1 * kl, rtol=1e-5)
  np.testing.assert_allclose(float(metrics["kl_ref"]), kl, rtol=1e-5)
  np.testing.assert_allclose(float(metrics["pg_loss"]), grpo + hacpo, rtol=1e-5)
  assert float(metrics["seq_tokens"]) == 8.0  # every row's sequence, counted once
  assert math.isclose(float(metrics["own_tokens"]), 4.0)  # GRPO's tokens only


def test_silent_rows_are_grpos_without_advantage():
  loss = HacpoOnSelectedLoss()
  assert loss.has_signal(batch(np.array([0.0, -0.5, 0.0, 2.0], np.float32))).tolist() == [
      False, True, True, True]  # HACPO's rows always move (the KL)
  np.testing.assert_allclose(loss.units(batch()), [2.0, 2.0, 1.0, 1.0])
