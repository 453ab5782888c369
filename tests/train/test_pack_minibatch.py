"""``pack_minibatch``: each row's [prompt | response | pad] layout, masks and columns, by hand."""

import numpy as np

from graft_jax.train.methods.hacpo import HACPO_COLUMNS, HacpoBatch
from graft_jax.train.update_rows import KIND_SGT, Rows, field_dtypes, pack_minibatch

PAD = 0


def three_rows():
  rows = Rows()
  rows.add([5, 6], [7, 8, 9], 0, adv=0.5, old_logp=[-1.0, -2.0, -3.0])
  rows.add([5, 6, 4], [3], 1, adv=-1.5, weight=0.9, keep=False, grafted=True, is_self=False,
           src_mean_logp=-2.5, cap_ratio=2.0, old_logp=[-4.0])
  rows.add([1], [2, 3], 1, kind=KIND_SGT, grafted=True)
  rows.ref_logp[0] = np.array([-0.1, -0.2, -0.3], np.float32)
  return rows


def test_layout_masks_and_columns():
  batch = pack_minibatch(three_rows(), [0, 1, 2], PAD, multiple=4, columns=HACPO_COLUMNS)
  # Longest row: 2 + 3 = 5 tokens, rounded up to a multiple of 4.
  assert batch["ids"].tolist() == [[5, 6, 7, 8, 9, 0, 0, 0],
                                   [5, 6, 4, 3, 0, 0, 0, 0],
                                   [1, 2, 3, 0, 0, 0, 0, 0]]
  assert batch["attn"].astype(int).tolist() == [[1, 1, 1, 1, 1, 0, 0, 0],
                                                [1, 1, 1, 1, 0, 0, 0, 0],
                                                [1, 1, 1, 0, 0, 0, 0, 0]]
  # Only kept rows' response tokens are in the loss; row 1 was dropped.
  assert batch["resp_mask"].tolist() == [[0, 0, 1, 1, 1, 0, 0, 0],
                                         [0] * 8,
                                         [0, 1, 1, 0, 0, 0, 0, 0]]
  np.testing.assert_array_equal(batch["old_logp"][0], [0, 0, -1, -2, -3, 0, 0, 0])
  np.testing.assert_array_equal(batch["old_logp"][1], [0, 0, 0, -4, 0, 0, 0, 0])
  assert not batch["old_logp"][2].any()  # an SGT row has no old log-probs
  np.testing.assert_allclose(batch["ref_logp"][0], [0, 0, -0.1, -0.2, -0.3, 0, 0, 0])
  assert not batch["ref_logp"][1:].any()
  np.testing.assert_array_equal(batch["adv"], [0.5, -1.5, 0.0])
  np.testing.assert_allclose(batch["weight"], [1.0, 0.9, 1.0])
  np.testing.assert_array_equal(batch["grafted"], [0, 1, 1])
  np.testing.assert_array_equal(batch["ppo"], [1, 1, 0])
  np.testing.assert_array_equal(batch["sgt"], [0, 0, 1])
  np.testing.assert_array_equal(batch["is_self"], [True, False, True])
  # HACPO's columns: given on row 1; elsewhere their defaults, the generator's mean the
  # row's own old log-probs' (-2 for row 0; none on the SGT row).
  np.testing.assert_array_equal(batch["src_mean_logp"], [-2.0, -2.5, 0.0])
  np.testing.assert_array_equal(batch["cap_ratio"], [1.0, 2.0, 1.0])
  assert batch["ids"].dtype == np.int32 and batch["resp_mask"].dtype == np.float32


def test_rows_in_the_order_given_and_an_empty_response_kept_masked():
  rows = three_rows()
  rows.add([9, 9], [], 2, adv=3.0)  # an empty re-tokenization: never in the loss
  batch = pack_minibatch(rows, [3, 0], PAD, multiple=16)
  assert batch["ids"].shape == (2, 16)
  assert batch["ids"][0, :3].tolist() == [9, 9, 0] and batch["ids"][1, :5].tolist() == [5, 6, 7, 8, 9]
  assert not batch["resp_mask"][0].any()
  np.testing.assert_array_equal(batch["adv"], [3.0, 0.5])


def test_rows_of_groups_follows_the_group_order():
  rows = three_rows()
  assert rows.rows_of_groups([1, 0]).tolist() == [1, 2, 0]


def test_fields_and_dtypes_are_the_declared_ones():
  # The memory plan lowers the update from TOKEN_FIELDS / ROW_FIELDS: they must be
  # exactly what a packed minibatch holds.
  from graft_jax.train.update_rows import ROW_FIELDS, TOKEN_FIELDS
  batch = pack_minibatch(three_rows(), [0, 1, 2], PAD, multiple=4)
  assert {k: v.dtype for k, v in batch.items()} == {
      k: np.dtype(d) for k, d in {**TOKEN_FIELDS, **ROW_FIELDS}.items()}
  assert all(batch[k].shape == (3, 8) for k in TOKEN_FIELDS)
  assert all(batch[k].shape == (3,) for k in ROW_FIELDS)


def test_a_method_column_travels_only_with_the_batch_that_declares_it():
  shared = pack_minibatch(three_rows(), [0, 1, 2], PAD, multiple=4)
  assert not {c.name for c in HACPO_COLUMNS} & set(shared)
  hacpo = pack_minibatch(three_rows(), [0, 1, 2], PAD, multiple=4, columns=HACPO_COLUMNS)
  assert set(hacpo) - set(shared) == {"is_self", "src_mean_logp", "cap_ratio"}
  dtypes = field_dtypes(HacpoBatch)
  assert all(hacpo[k].dtype == np.dtype(dtypes[k]) for k in HacpoBatch.__dataclass_fields__)
