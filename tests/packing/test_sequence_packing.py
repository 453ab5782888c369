"""First-fit-decreasing packing of whole sequences, and packed scoring's programs."""

import numpy as np
from flax import nnx
from hypothesis import given, settings, strategies as st

from graft_jax.models import logprobs
from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.packing import sequence_packing as sp
from graft_jax.train import row_logprobs

CFG = ModelConfig(model_type="qwen3", vocab_size=53, hidden_size=32, intermediate_size=48,
                  num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def test_first_fit_decreasing_by_hand():
  # Decreasing: 7 (bin 0), 5 (bin 1), 4 (bin 1: 9), 3 (bin 0: 10), 2 (bin 2), 1 (bin 1: 10).
  assert sp.first_fit_decreasing([3, 7, 1, 5, 4, 2], 10) == [[1, 0], [3, 4, 2], [5]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(40, 64))
def test_every_sequence_is_placed_once_within_its_row(lengths, row_length):
  rng = np.random.default_rng(len(lengths))
  seqs = [rng.integers(1, 50, n).tolist() for n in lengths]
  packed = sp.pack_sequences(seqs, row_length, pad_id=0)
  for n, seq in enumerate(seqs):
    r, s = packed.row_N[n], packed.start_N[n]
    assert packed.ids_RxL[r, s:s + len(seq)].tolist() == seq
    # Its own segment covers exactly its tokens.
    assert np.sum(packed.segment_ids_RxL[r] == packed.segment_ids_RxL[r, s]) == len(seq)
  assert np.sum(packed.segment_ids_RxL > 0) == sum(lengths)
  # First fit: no two rows could have shared one (each pair exceeds the row).
  fill = (packed.segment_ids_RxL > 0).sum(1)
  assert all(a + b > row_length for i, a in enumerate(fill) for b in fill[i + 1:])


def test_long_sequences_get_a_second_shape():
  calls = sp.plan_calls([10, 50, 33, 90, 65], row_length=32, rows=2)
  assert {length for _, length in calls} == {32, 64, 128}
  assert sp.long_row_length(64, 32) == 64 and sp.long_row_length(65, 32) == 128
  placed = sorted(n for bins, _ in calls for b in bins for n in b)
  assert placed == [0, 1, 2, 3, 4]


def test_packed_scoring_compiles_at_most_two_programs_whatever_the_lengths():
  model = init_model(CFG, rngs=nnx.Rngs(0))
  before = logprobs._token_logprobs_packed._cache_size()
  rng = np.random.default_rng(0)
  for step in range(6):
    n = int(rng.integers(1, 30))
    prompts = [rng.integers(1, 53, rng.integers(1, 8)).tolist() for _ in range(n)]
    responses = [rng.integers(1, 53, rng.integers(0, 25)).tolist() for _ in range(n)]
    if step == 3:  # a sequence past the cap (a peer's re-tokenized text)
      responses[0] = rng.integers(1, 53, 40).tolist()
    row_logprobs.score_rows(model, prompts, responses, 0, length_cap=32, token_budget=96)
  assert logprobs._token_logprobs_packed._cache_size() - before <= 2
