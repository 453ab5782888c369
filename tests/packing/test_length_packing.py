"""Micro-batches packed by length: every row once, within the token budget, from a small
set of shapes fixed by the run's settings; which rows have a loss term (tests/train/
test_update.py: the packed update equals the unsplit one)."""

import numpy as np
from hypothesis import given, settings, strategies as st

from graft_jax.packing import length_packing
from graft_jax.train.methods.base import ClippedTokenLoss, PpoBatch
from graft_jax.train.methods.hacpo import HacpoLoss


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
    want = min(max(1, budget // length), cap) if budget else cap  # 0: no budget
    assert per_device == want  # the shape depends on L only
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


def batch_of(b, t):
  """A host batch whose every value tells its row and column."""
  ids = np.arange(b * t).reshape(b, t) + 1
  row = np.arange(1, b + 1, dtype=np.float32)
  return PpoBatch(ids=ids, attn=np.ones((b, t), bool), resp_mask=np.ones((b, t), np.float32),
                  old_logp=ids.astype(np.float32), adv=row, weight=row, grafted=row, ppo=row,
                  sgt=row)


def test_micro_batches_of_one_shape_stack_in_zero_padded_slots():
  plan = length_packing.plan_micro_batches([500, 40, 60, 30, 120, 50, 110, 100], 512,
                                           budget_tokens=256)
  # 500 alone at L=512; 120 and 110, then 100 and 60, at L=128 (2 rows each); 50, 40 and
  # 30 at L=64 (4 rows, one of them padding).
  assert [(idx.tolist(), r, length) for idx, r, length in plan] == [
      ([0], 1, 512), ([4, 6], 2, 128), ([7, 2], 2, 128), ([5, 1, 3], 4, 64)]
  batch = batch_of(8, 512)
  stack = length_packing.stack_micro_batches(batch, [plan[1][0], plan[2][0]], 2, 128, slots=4)
  assert stack.ids.shape == (4, 2, 128) and stack.adv.shape == (4, 2)
  for j, idx in enumerate([plan[1][0], plan[2][0]]):
    np.testing.assert_array_equal(stack.ids[j], batch.ids[idx, :128])
    np.testing.assert_array_equal(stack.adv[j], batch.adv[idx])
  assert not stack.ids[2:].any() and not stack.attn[2:].any()  # the slots after them: zeros
  last = length_packing.stack_micro_batches(batch, [plan[3][0]], 4, 64, slots=2)
  assert last.ids[0, 0, 0] == 5 * 512 + 1 and not last.attn[0, 3:].any()  # a padding row


def test_the_runs_shapes_are_every_bucket_and_hold_every_plan():
  shapes = length_packing.run_shapes(8, 512, 256)
  assert shapes == [(2, 4, 64), (4, 2, 128), (8, 1, 256), (8, 1, 512)]
  for lengths in ([500, 40, 60, 30, 120, 50, 110, 100], [30] * 8, [300, 20]):
    plan = length_packing.plan_micro_batches(lengths, 512, 256, num_rows=8)
    for _, rows, length in plan:
      slots = [s for s, r, l in shapes if (r, l) == (rows, length)]
      assert slots and sum(1 for _, r, l in plan if (r, l) == (rows, length)) <= slots[0]
  assert length_packing.run_shapes(6, 56, 0) == [(1, 6, 56)]  # one bucket, no budget: one shape


def test_rows_with_a_loss_term():
  resp = np.array([[0, 1, 1, 0]] * 5 + [[0, 0, 0, 0]], np.float32)
  batch = PpoBatch(ids=np.ones((6, 4), np.int32), attn=np.ones((6, 4), bool), resp_mask=resp,
                   old_logp=np.zeros((6, 4), np.float32),
                   adv=np.array([0.5, 0.0, 0.7, 0.0, 0.0, 0.0], np.float32),
                   weight=np.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0], np.float32),
                   grafted=np.zeros(6, np.float32),
                   ppo=np.array([1, 1, 1, 0, 1, 1], np.float32),
                   sgt=np.array([0, 0, 0, 1, 0, 0], np.float32))
  # live; zero advantage; zero gate weight; an SGT row; zero advantage; zero advantage
  assert ClippedTokenLoss().has_signal(batch).tolist() == [True, False, False, False, False,
                                                           False]
  assert ClippedTokenLoss(sgt_coef=0.1).has_signal(batch).tolist() == [
      True, False, False, True, False, False]
  assert HacpoLoss().has_signal(batch).all()  # the KL moves every row
