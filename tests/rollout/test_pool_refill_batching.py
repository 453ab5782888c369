"""The slot pool's batched refills (``refill_at``): a device waits for that many free
slots before it prefills, so a full pool makes fewer passes over the weights, and every
request still samples the tokens it samples when each freed slot refills at once."""

import numpy as np
import pytest
import tiny_hf

from graft_jax.models import load_hf
from graft_jax.rollout import SamplingParams
from graft_jax.rollout.continuous import ContinuousSamplerEngine

PAD = 0


@pytest.fixture(scope="module")
def model(ckpt_root):
  return load_hf(tiny_hf.checkpoint("qwen3", ckpt_root).path)[0]


def _pool(model, refill_at, eos_ids=-1):
  return ContinuousSamplerEngine(model, eos_ids=eos_ids, pad_id=PAD, slots=4, prefill_group=4,
                                 max_prompt_len=16, max_requests=8, shrinks=0,
                                 refill_at=refill_at)


@pytest.mark.parametrize("refill_at,passes", [(1, 3), (2, 2)])
def test_refill_passes_follow_a_schedule_worked_by_hand(model, refill_at, passes):
  """Slots 4, budgets [1, 3, 2, 4, 1, 1], no EOS. Both ways the first pass admits r0-r3
  and step 1 ends r0. One at a time: r4 alone before step 2 (r2 and r4 end), r5 alone
  before step 3 (r1 and r5 end): 3 passes. Two at a time: one slot free before step 2
  is too few (r2 ends there); before step 3 two are, and r4 and r5 enter together:
  2 passes. r3 ends at step 4 either way: 4 + 4 + 3 + 1 = 4 + 3 + 4 + 1 = 12 busy
  slot-steps of 16."""
  budgets = [1, 3, 2, 4, 1, 1]
  engine = _pool(model, refill_at)
  batch = engine.generate([[5, 6, 7]], 6, SamplingParams(max_new_tokens=8, temperature=1.0,
                                                         seed=4), budgets=budgets)
  np.testing.assert_array_equal(batch.lengths_B, budgets)
  m = engine.last_metrics
  assert m["prefill_passes"] == passes
  assert m["decode_steps"] == 4
  assert m["slot_occupancy"] == pytest.approx(12 / 16)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_refills_sample_the_same_tokens(model, seed):
  """Random budgets and EOS ids: every request's tokens and log-probs equal the one-at-a-time
  pool's, and no request is dropped or sampled twice, in no more passes."""
  rng = np.random.default_rng(seed)
  prompts = [list(rng.integers(3, 60, size=int(k))) for k in rng.integers(2, 12, size=3)]
  budgets = [int(b) for b in rng.integers(1, 9, size=3 * 2)]
  params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=seed)
  eos = tuple(range(2, 12))  # some responses end early, at random steps
  one = _pool(model, 1, eos)
  three = _pool(model, 3, eos)
  a = one.generate(prompts, 2, params, budgets=budgets)
  b = three.generate(prompts, 2, params, budgets=budgets)
  np.testing.assert_array_equal(a.lengths_B, b.lengths_B)
  np.testing.assert_array_equal(a.finished_B, b.finished_B)
  np.testing.assert_array_equal(a.tokens_BxL, b.tokens_BxL)
  np.testing.assert_allclose(a.logp_BxL, b.logp_BxL, atol=1e-5)
  assert (a.lengths_B >= 1).all()
  assert three.last_metrics["prefill_passes"] <= one.last_metrics["prefill_passes"]
  assert three.last_metrics["tokens"] == one.last_metrics["tokens"] == a.lengths_B.sum()


def test_refill_at_must_be_positive(model):
  with pytest.raises(ValueError, match="refill_at"):
    _pool(model, 0)
