"""Micro-batches packed by length: every row once, within the token budget, from a small
fixed set of shapes; the packed update equals the unsplit one (fp32, 1e-6) and a new
mix of lengths compiles nothing new."""

import threading
import types

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings, strategies as st

from graft_jax.train import length_packing, microbatch
from graft_jax.train.update_rows import pack_minibatch
from graft_jax.train.update import LossSpec, loss_fn, to_device_batch
from tests.train.test_microbatch import CFG, graft_rows


def test_length_bucket_is_the_next_power_of_two_multiple():
  got = length_packing.length_bucket([1, 64, 65, 128, 129, 300, 700], t=640)
  assert got.tolist() == [64, 64, 128, 128, 256, 512, 640]  # capped at T


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(1, 900), min_size=1, max_size=70),
       budget=st.sampled_from([0, 100, 256, 1000, 4096]), shards=st.sampled_from([1, 2, 4]))
def test_plan_covers_every_row_once_within_the_budget(lengths, budget, shards):
  t = 960
  plan = length_packing.plan_micro_batches(lengths, t, budget, shards)
  rows = np.concatenate([idx for idx, _, _ in plan])
  assert sorted(rows.tolist()) == list(range(len(lengths)))
  cap = -(-len(lengths) // shards)
  for idx, r, length in plan:
    assert 0 < len(idx) <= r and r % shards == 0
    assert max(lengths[i] for i in idx) <= length <= t
    per_device = r // shards
    assert per_device == min(max(1, budget // length), cap)  # the shape depends on L only
    assert per_device == 1 or per_device * length <= budget or per_device == cap
  # Longest rows first: each micro-batch's first row is at least as long as any later row.
  firsts = [lengths[idx[0]] for idx, _, _ in plan]
  assert firsts == sorted(firsts, reverse=True)


def test_short_rows_share_a_micro_batch_and_each_is_cut_to_its_length():
  lengths = [500, 40, 60, 30, 120, 50]
  plan = length_packing.plan_micro_batches(lengths, 512, budget_tokens=512)
  # 500 alone (L=512 -> 1 row); 120 opens an L=128 batch of 4 rows; the last one at L=64.
  assert [(idx.tolist(), r, length) for idx, r, length in plan] == [
      ([0], 1, 512), ([4, 2, 5, 1], 4, 128), ([3], 6, 64)]
  batch = {"ids": np.arange(6 * 512).reshape(6, 512), "attn": np.ones((6, 512), bool),
           "adv": np.arange(6, dtype=np.float32)}
  mb = length_packing.gather_micro_batch(batch, plan[2][0], 6, 64)
  assert mb["ids"].shape == (6, 64) and mb["adv"].shape == (6,)
  assert mb["ids"][0, 0] == 3 * 512 and not mb["attn"][1:].any()


def test_micro_batches_are_grouped_by_shape_and_stacked_in_zero_padded_slots():
  plan = length_packing.plan_micro_batches([500, 40, 60, 30, 120, 50, 110, 100], 512,
                                           budget_tokens=256)
  # 500 alone at L=512; 120 and 110, then 100 and 60, at L=128 (2 rows each); 50, 40 and
  # 30 at L=64 (4 rows, one of them padding).
  groups = length_packing.by_shape(plan)
  assert [(shape, [(i, idx.tolist()) for i, idx in entries]) for shape, entries in groups] == [
      ((1, 512), [(0, [0])]), ((2, 128), [(1, [4, 6]), (2, [7, 2])]), ((4, 64), [(3, [5, 1, 3])])]
  batch = {"ids": np.arange(8 * 512).reshape(8, 512) + 1, "attn": np.ones((8, 512), bool),
           "adv": np.arange(1, 9, dtype=np.float32)}
  (rows, length), entries = groups[1]
  stack = length_packing.stack_micro_batches(batch, entries, rows, length, slots=4)
  assert stack["ids"].shape == (4, 2, 128) and stack["adv"].shape == (4, 2)
  for j, (_, idx) in enumerate(entries):
    want = length_packing.gather_micro_batch(batch, idx, rows, length)
    for k in batch:
      np.testing.assert_array_equal(stack[k][j], want[k])
  for k in batch:  # the slots after the micro-batches are zeros
    assert not stack[k][2:].any()


def test_shape_grads_runs_only_the_first_count_micro_batches():
  graphdef, params = nnx.split(_model())
  spec = LossSpec()
  rows = graft_rows(np.random.default_rng(3))
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  totals = {k: np.float32(v) for k, v in microbatch.minibatch_totals(batch).items()}
  half = len(rows) // 2
  first = dict(length_packing.gather_micro_batch(batch, np.arange(half), half,
                                                 batch["ids"].shape[1]), **totals)
  second = dict(length_packing.gather_micro_batch(batch, np.arange(half, 2 * half), half,
                                                  batch["ids"].shape[1]), **totals)
  stack = {k: np.stack([first[k], second[k]]) for k in first}
  stack["share"] = np.asarray([0.25, 0.75], np.float32)
  zeros = jax.tree.map(lambda p: np.zeros(p.shape, np.float32), params)
  run = jax.jit(lambda p, a, s, n: microbatch.shape_grads(p, a, s, n, 1, graphdef=graphdef,
                                                           spec=spec))
  (_, want1), g1 = jax.value_and_grad(loss_fn, has_aux=True)(
      params, to_device_batch(first), graphdef, spec, 1)
  (_, want2), g2 = jax.value_and_grad(loss_fn, has_aux=True)(
      params, to_device_batch(second), graphdef, spec, 1)
  got1, m1 = run(params, zeros, stack, np.int32(1))
  got2, m2 = run(params, zeros, stack, np.int32(2))
  scale = max(float(np.abs(w).max()) for w in jax.tree.leaves(g2))
  assert scale > 1e-4
  for a, b, w1, w2 in zip(*map(jax.tree.leaves, (got1, got2, g1, g2))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(w1), rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(np.asarray(b), np.asarray(w1) + np.asarray(w2), rtol=0,
                               atol=1e-6 * scale)
  # Summed metrics add up; fractions are weighted by each micro-batch's share.
  np.testing.assert_allclose(float(m2["pg_loss"]), float(want1["pg_loss"] + want2["pg_loss"]),
                             rtol=1e-6)
  np.testing.assert_allclose(float(m1["pg_loss"]), float(want1["pg_loss"]), rtol=1e-6)
  frac = [k for k in want1 if not microbatch.summed_metric(k)]
  assert frac
  for k in frac:
    np.testing.assert_allclose(float(m2[k]), 0.25 * float(want1[k]) + 0.75 * float(want2[k]),
                               rtol=1e-5, atol=1e-7)


def _policy(graphdef, tx):
  return types.SimpleNamespace(graphdef=graphdef, tx=tx, compiled={}, mesh=None,
                               param_sharding=None, opt_sharding=None)


@pytest.mark.parametrize("spec,budget,sgt", [
    (LossSpec(), 256, False),  # groups cut across micro-batches of different lengths
    (LossSpec(ratio_level="sequence"), 300, False),
    (LossSpec(sgt_coef=0.1), 256, True),
    (LossSpec(kind="hacpo", kl_coef=1e-3), 256, False),
], ids=["graft", "sequence", "sgt", "hacpo"])
def test_packed_gradient_equals_the_unsplit_gradient(spec, budget, sgt):
  rng = np.random.default_rng(0)
  graphdef, params = nnx.split(_model())
  rows = graft_rows(rng, sgt, max_response=150)  # 5 to 158 tokens: buckets 64, 128, 256
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  (want_loss, _), want = jax.jit(lambda p, b: jax.value_and_grad(loss_fn, has_aux=True)(
      p, b, graphdef, spec, 1))(params, to_device_batch(batch))
  plan = length_packing.plan_micro_batches(batch["attn"].sum(1), batch["ids"].shape[1], budget)
  assert len(plan) > 2 and len({length for _, _, length in plan}) > 1
  got, metrics = microbatch.packed_grads(_policy(graphdef, None), params, batch, 1, spec,
                                         micro_batch_tokens=budget)
  # Cutting a row to a shorter padded length changes XLA's shapes and so its rounding:
  # the same row's log-probs at T = 64 and T = 192 differ by up to 4.8e-7 (one ulp of
  # values near 4), which moves the loss by a few 1e-7 of its value.
  np.testing.assert_allclose(float(metrics["loss"]), float(want_loss), rtol=1e-5)
  scale = max(float(np.abs(w).max()) for w in jax.tree.leaves(want))
  assert scale > 1e-4  # a real gradient, not zeros
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-6 * scale)


def _model():
  from graft_jax.models import init_model
  return init_model(CFG, rngs=nnx.Rngs(1))


def _updates_and_compiles(batches, **kw):
  """Packed updates over ``batches`` in turn: (their metrics, the (gradient, optimizer
  step) programs' compile counts after each)."""
  graphdef, params = nnx.split(_model())
  tx = optax.sgd(1e-3)
  policy = _policy(graphdef, tx)
  opt = tx.init(params)
  spec = LossSpec()
  metrics, counts = [], []
  for batch in batches:
    params, opt, m = microbatch.update(policy, params, opt, batch, 0, spec,
                                       micro_batch_tokens=96, pack_by_length=True, **kw)
    grad_fn, apply_fn = policy.compiled[("packed", spec)]
    metrics.append(m)
    counts.append((grad_fn._cache_size(), apply_fn._cache_size()))
  return metrics, counts


def test_a_new_mix_of_lengths_compiles_nothing_new():
  # Other lengths, the same buckets (the batch is all short rows).
  batches = [pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
             for rows in (graft_rows(np.random.default_rng(seed)) for seed in range(3))]
  _, counts = _updates_and_compiles(batches)
  assert counts == counts[:1] * 3


def _silence(rows, groups=(0,), zero_weight_row=None):
  """``rows`` with the given groups' advantages set to 0 (all-fail / all-pass) and,
  optionally, one row's gate weight set to 0."""
  for r, g in enumerate(rows.group):
    if g in groups:
      rows.adv[r] = 0.0
  if zero_weight_row is not None:
    rows.weight[zero_weight_row] = 0.0
  return rows


def test_silent_rows_are_those_with_no_loss_term():
  batch = {"ids": np.ones((6, 4), np.int32),
           "resp_mask": np.array([[0, 1, 1, 0]] * 5 + [[0, 0, 0, 0]], np.float32),
           "adv": np.array([0.5, 0.0, 0.7, 0.0, 0.0, 0.0], np.float32),
           "weight": np.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0], np.float32),
           "ppo": np.array([1, 1, 1, 0, 1, 1], np.float32),
           "sgt": np.array([0, 0, 0, 1, 0, 0], np.float32)}
  # live; zero advantage; zero gate weight; an SGT row; zero advantage; no tokens at all
  assert microbatch.silent_rows(batch, LossSpec()).tolist() == [False, True, True, True, True,
                                                                 False]
  assert microbatch.silent_rows(batch, LossSpec(sgt_coef=0.1)).tolist() == [
      False, True, True, False, True, False]
  assert not microbatch.silent_rows(batch, LossSpec(kind="hacpo")).any()


@pytest.mark.parametrize("spec,sgt", [(LossSpec(), False), (LossSpec(sgt_coef=0.1), True)],
                         ids=["graft", "sgt"])
def test_leaving_out_silent_rows_keeps_the_unsplit_gradient(spec, sgt):
  rng = np.random.default_rng(3)
  graphdef, params = nnx.split(_model())
  # Group 0 all-fail; one grafted row gated to 0; with SGT, group 3's SGT row has A = 0.
  rows = _silence(graft_rows(rng, sgt, max_response=150), groups=(0,), zero_weight_row=9)
  if sgt:
    rows.adv[3 * 4] = 0.0
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  silent = microbatch.silent_rows(batch, spec)
  assert silent.sum() == 5 and (not sgt or not silent[3 * 4])
  (want_loss, _), want = jax.jit(lambda p, b: jax.value_and_grad(loss_fn, has_aux=True)(
      p, b, graphdef, spec, 1))(params, to_device_batch(batch))
  got, metrics = microbatch.packed_grads(_policy(graphdef, None), params, batch, 1, spec,
                                         micro_batch_tokens=256, skip_silent=True)
  assert float(metrics["silent_rows"]) == 5
  assert float(metrics["rows_run"]) == (batch["resp_mask"].sum(1) > 0).sum() - 5
  np.testing.assert_allclose(float(metrics["loss"]), float(want_loss), rtol=1e-5)
  scale = max(float(np.abs(w).max()) for w in jax.tree.leaves(want))
  assert scale > 1e-4
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-6 * scale)


def test_a_minibatch_of_silent_rows_runs_no_micro_batch_and_still_steps():
  graphdef, params = nnx.split(_model())
  rows = _silence(graft_rows(np.random.default_rng(4)), groups=(0, 1, 2, 3))
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  spec = LossSpec()
  got, metrics = microbatch.packed_grads(_policy(graphdef, None), params, batch, 1, spec,
                                         micro_batch_tokens=96, skip_silent=True)
  assert all(not np.asarray(g).any() for g in jax.tree.leaves(got))
  assert float(metrics["rows_run"]) == 0 and float(metrics["silent_rows"]) > 0
  assert float(metrics["loss"]) == 0.0
  # AdamW's weight decay still moves the weights on a zero gradient.
  tx = optax.adamw(1e-3, weight_decay=0.1)
  before = jax.device_get(params)
  new, _, _ = microbatch.update(_policy(graphdef, tx), params, tx.init(params), batch, 0, spec,
                                micro_batch_tokens=96, pack_by_length=True, skip_silent=True)
  assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before),
                                                       jax.tree.leaves(jax.device_get(new))))


def test_other_silent_rows_compile_nothing_new():
  silent = [(), (0,), (1, 2), (0, 1, 2, 3), (3,)]
  batches = [pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
             for rows in (_silence(graft_rows(np.random.default_rng(5)), groups=groups)
                          for groups in silent)]
  metrics, counts = _updates_and_compiles(batches, skip_silent=True)
  for m, groups in zip(metrics, silent):  # row 14 (group 3) is dropped: not counted
    assert float(m["silent_rows"]) == sum(r != 14 for r in range(16) if r // 4 in groups)
  assert counts == counts[:1] * len(silent)


class _ThreadRecorder:
  """Wraps a program: the threads that called it."""

  def __init__(self, fn):
    self.fn, self.threads = fn, set()

  def __call__(self, *args):
    self.threads.add(threading.get_ident())
    return self.fn(*args)


def test_lanes_side_by_side_give_the_unsplit_gradient_and_the_same_each_run():
  rng = np.random.default_rng(7)
  spec = LossSpec()
  graphdef, params = nnx.split(_model())
  rows = graft_rows(rng, False, max_response=150)
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  (want_loss, want_m), want = jax.jit(lambda p, b: jax.value_and_grad(loss_fn, has_aux=True)(
      p, b, graphdef, spec, 1))(params, to_device_batch(batch))
  plan = length_packing.plan_micro_batches(batch["attn"].sum(1), batch["ids"].shape[1], 256)
  assert max(len(e) for _, e in length_packing.by_shape(plan)) >= 3  # a shape to cut 3 ways
  policy = _policy(graphdef, None)
  one, m1 = microbatch.packed_grads(policy, params, batch, 1, spec, micro_batch_tokens=256)
  grad_fn, apply_fn = microbatch.packed_programs(policy, spec)
  recorder = _ThreadRecorder(grad_fn)
  policy.compiled[("packed", spec)] = (recorder, apply_fn)
  runs = [microbatch.packed_grads(policy, params, batch, 1, spec, micro_batch_tokens=256,
                                  streams=3) for _ in range(2)]
  assert len(recorder.threads) == 3
  (got, metrics), (again, _) = runs
  scale = max(float(np.abs(w).max()) for w in jax.tree.leaves(want))
  assert scale > 1e-4
  for g, a, w, o in zip(*map(jax.tree.leaves, (got, again, want, one))):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(a))  # the same every run
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(np.asarray(g), np.asarray(o), rtol=0, atol=1e-6 * scale)
  np.testing.assert_allclose(float(metrics["loss"]), float(want_loss), rtol=1e-5)
  for k in m1:  # fractions weighted by share, sums and counts: the same in another order
    np.testing.assert_allclose(float(metrics[k]), float(m1[k]), rtol=1e-5, atol=1e-7,
                               err_msg=k)
  assert float(metrics["ratio_mean"]) == pytest.approx(float(want_m["ratio_mean"]), rel=1e-5)


def test_lanes_of_silent_rows_run_nothing_and_new_lengths_compile_nothing_new():
  graphdef, params = nnx.split(_model())
  rows = _silence(graft_rows(np.random.default_rng(4)), groups=(0, 1, 2, 3))
  batch = pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
  got, metrics = microbatch.packed_grads(_policy(graphdef, None), params, batch, 1, LossSpec(),
                                         micro_batch_tokens=96, skip_silent=True, streams=2)
  assert all(not np.asarray(g).any() for g in jax.tree.leaves(got))
  assert float(metrics["rows_run"]) == 0
  batches = [pack_minibatch(rows, np.arange(len(rows)), pad_id=0)
             for rows in (graft_rows(np.random.default_rng(seed)) for seed in range(3))]
  _, counts = _updates_and_compiles(batches, streams=2)
  assert counts == counts[:1] * 3
