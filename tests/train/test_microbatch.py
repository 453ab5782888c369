"""Micro-batched gradients equal the unsplit minibatch's (fp32, 1e-6), budgets that split groups included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graft_jax.models import ModelConfig, init_model
from graft_jax.train import microbatch
from graft_jax.train.update_rows import KIND_SGT, Rows, pack_minibatch
from graft_jax.train.update import LossSpec, loss_fn

N = 4  # rows per group
CFG = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=32, intermediate_size=48,
                  num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, qk_norm=True)


def graft_rows(rng, sgt=False, max_response=30):
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


def grads_both_ways(spec, rows_per_micro, sgt=False):
  rng = np.random.default_rng(0)
  graphdef, params = nnx.split(init_model(CFG, rngs=nnx.Rngs(1)))
  rows = graft_rows(rng, sgt)
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  (want_loss, _), want = jax.jit(lambda p, b: jax.value_and_grad(loss_fn, has_aux=True)(
      p, b, graphdef, spec, 1))(params, {k: jnp.asarray(v) for k, v in batch.items()})
  micro = microbatch.split_minibatch(batch, rows_per_micro, by_rows=spec.kind == "hacpo")
  got, metrics = jax.jit(lambda p, m: microbatch.accumulated_grads(
      p, m, 1, graphdef=graphdef, spec=spec))(params, micro)
  return float(want_loss), jax.tree.leaves(want), float(metrics["loss"]), jax.tree.leaves(got)


@pytest.mark.parametrize("spec,rows,sgt", [
    (LossSpec(), 3, False),  # 3 rows: micro-batches cut through groups of 4
    (LossSpec(), 5, False),
    (LossSpec(ratio_level="sequence"), 7, False),
    (LossSpec(sgt_coef=0.1), 3, True),
    (LossSpec(kind="hacpo", kl_coef=1e-3), 3, False),
], ids=["graft-3rows", "graft-5rows", "sequence-7rows", "sgt-3rows", "hacpo-3rows"])
def test_accumulated_equals_unsplit(spec, rows, sgt):
  want_loss, want, got_loss, got = grads_both_ways(spec, rows, sgt)
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6, atol=1e-7)
  scale = max(float(np.abs(w).max()) for w in want)
  assert scale > 1e-4  # a real gradient, not zeros
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-6 * scale)


def test_rows_per_micro_from_the_token_budget():
  assert microbatch.rows_per_micro(32, 128, 0) == 32  # no budget: one pass
  assert microbatch.rows_per_micro(32, 128, 3 * 128 + 5) == 3
  assert microbatch.rows_per_micro(32, 128, 100) == 1  # at least one row
  assert microbatch.rows_per_micro(32, 128, 3 * 128, shards=8) == 24  # per device x shards
  assert microbatch.rows_per_micro(6, 128, 10 ** 6, shards=4) == 8  # padded to the shards


def test_split_pads_and_counts_the_whole_minibatch():
  rows = graft_rows(np.random.default_rng(0))
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  micro = microbatch.split_minibatch(batch, 5)
  assert micro["ids"].shape[:2] == (4, 5)  # 16 rows -> 4 micro-batches, the last padded
  assert not micro["resp_mask"][3, 1:].any()
  kept = sum(len(r) for r, k in zip(rows.response_ids, rows.keep) if k)
  assert micro["num_tokens"].tolist() == [kept] * 4
  np.testing.assert_allclose(micro["share"].sum(), 1.0, rtol=1e-6)
