"""ContinuousSamplerEngine: the static sampler's tokens under the same keys, whatever
the pool size; one compiled program across prompt counts, samples and lengths; its
occupancy and live-KV figures against a schedule worked out by hand."""

import jax.numpy as jnp
import numpy as np
import pytest
import tiny_hf
from flax import nnx

from graft_jax.models import load_hf
from graft_jax.rollout import JaxSamplerEngine, RolloutEngine, SamplingParams
from graft_jax.rollout.continuous import ContinuousSamplerEngine
from graft_jax.rollout.slot_pool import pool_sizes, run_pool

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 43))]
# Several EOS ids, so the random checkpoint's responses end at different lengths.
EOS, PAD = tuple(range(2, 40)), 0


@pytest.fixture(scope="module")
def model(ckpt_root):
  return load_hf(tiny_hf.checkpoint("qwen3", ckpt_root).path)[0]


def _continuous(model, slots, **kw):
  return ContinuousSamplerEngine(model, eos_ids=EOS, pad_id=PAD, slots=slots, max_prompt_len=48,
                                 **kw)


def _static(model):
  static = nnx.merge(*nnx.split(model))
  static.set_decode_attention("xla")  # the reference the pool's attention is
  return JaxSamplerEngine(static, eos_ids=EOS, pad_id=PAD)


def _assert_same(a, b):
  np.testing.assert_array_equal(a.lengths_B, b.lengths_B)
  np.testing.assert_array_equal(a.finished_B, b.finished_B)
  np.testing.assert_array_equal(a.tokens_BxL, b.tokens_BxL)
  np.testing.assert_allclose(a.logp_BxL, b.logp_BxL, atol=1e-5)


@pytest.mark.parametrize("params", [SamplingParams(max_new_tokens=24, temperature=1.0, seed=3),
                                    SamplingParams(max_new_tokens=24, temperature=0.7, top_k=40,
                                                   top_p=0.9, seed=5)])
def test_pool_samples_what_the_static_sampler_does(model, params):
  engine = _continuous(model, slots=2)
  assert isinstance(engine, RolloutEngine)
  pool = engine.generate(PROMPTS, 3, params)
  static = _static(model).generate(PROMPTS, 3, params)
  # The keys end responses at different lengths: slots are refilled mid-call.
  assert len(set(static.lengths_B.tolist())) > 2 and static.finished_B.any()
  _assert_same(pool, static)


def test_rows_do_not_depend_on_their_slot(model):
  """One slot decodes the rows one after another; five start most of them at once,
  in other slots and at other pool steps, their prompts (1 and 3 chunks) prefilled
  together: all five in one pass, or three then two (a pass with an empty row)."""
  params = SamplingParams(max_new_tokens=24, temperature=1.0, seed=11)
  one = _continuous(model, slots=1).generate(PROMPTS, 2, params)
  five = _continuous(model, slots=5).generate(PROMPTS, 2, params)
  assert len(set(one.lengths_B.tolist())) > 2
  _assert_same(one, five)
  _assert_same(one, _continuous(model, slots=5, prefill_group=3).generate(PROMPTS, 2, params))


def test_one_program_per_prompt_bucket_across_counts_samples_and_lengths(model):
  """A call's window holds its own prompts: their longest, as a power of two in whole
  16-token chunks. Every call in one bucket, whatever its prompt count, samples per
  prompt and lengths, runs that bucket's program."""
  engine = ContinuousSamplerEngine(model, eos_ids=EOS, pad_id=PAD, slots=3, max_prompt_len=48,
                                   max_new_tokens=10, max_requests=12)
  params = SamplingParams(max_new_tokens=10, temperature=1.0)
  before = run_pool._cache_size()  # pylint: disable=protected-access
  programs = lambda: run_pool._cache_size() - before  # pylint: disable=protected-access
  # Longest 4 and 16 tokens: the 16-slot bucket; 17, 20 and 32: the 32-slot one.
  for prompts, n in (([[5] * 3, [6] * 4], 2), ([[6] * 16], 1), ([[4] * 2] * 5, 2)):
    assert engine.generate(prompts, n, params).tokens_BxL.shape == (len(prompts) * n, 10)
  assert programs() == 1
  for prompts, n in (([[7] * 17, [8] * 2], 4), ([[6] * 20], 1), ([[3] * 32] * 6, 2)):
    assert engine.generate(prompts, n, params).tokens_BxL.shape == (len(prompts) * n, 10)
    engine.set_weights(model)
  engine.generate([[5] * 3], 2, SamplingParams(max_new_tokens=6, temperature=1.0))
  assert programs() == 2 and engine.max_prompt_len == 64  # planned for 48: the 64 bucket
  # Past a capacity: one more program, whose capacity the smaller calls then reuse.
  engine.generate([[7] * 20] * 7, 2, params)
  assert engine.max_requests == 16 and programs() == 3
  engine.generate([[5] * 25, [6] * 4], 2, params)
  assert programs() == 3
  engine.generate([[5] * 60], 2, params)
  assert programs() == 4 and engine.max_prompt_len == 64


def test_a_short_call_holds_a_short_window(model):
  """The cache of a call of short prompts spans their bucket, not the run's longest
  prompt: the same requests in an engine planned for 512-token prompts decode the same
  tokens as in one planned for 16, with no program at the 512 window."""
  params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=5)
  prompts = [[5] * 3, [6] * 9]
  wide = ContinuousSamplerEngine(model, eos_ids=EOS, pad_id=PAD, slots=2, max_prompt_len=512,
                                 max_new_tokens=12, max_requests=4)
  narrow = ContinuousSamplerEngine(model, eos_ids=EOS, pad_id=PAD, slots=2, max_prompt_len=16,
                                   max_new_tokens=12, max_requests=4)
  before = run_pool._cache_size()  # pylint: disable=protected-access
  _assert_same(wide.generate(prompts, 2, params), narrow.generate(prompts, 2, params))
  assert run_pool._cache_size() - before == 1  # pylint: disable=protected-access


def test_metrics_follow_a_schedule_worked_by_hand(model):
  """Slots 2, budgets [1, 5, 1, 1], no EOS: steps 1-3 keep both slots busy (r0 then r2
  then r3 beside r1), steps 4-5 only r1: 8 busy slot-steps of 10 on the whole pool;
  without shrinks the pool stays at 2 slots, with one r1 decodes steps 4-5 alone in a
  pool of 1 (8 of 8)."""
  for shrinks, occupancy in ((0, 0.8), (1, 1.0)):
    engine = ContinuousSamplerEngine(model, eos_ids=-1, pad_id=PAD, slots=2, max_prompt_len=16,
                                     shrinks=shrinks)
    batch = engine.generate([[5, 6, 7, 8, 9]], 4, SamplingParams(max_new_tokens=8),
                            budgets=[1, 5, 1, 1])
    np.testing.assert_array_equal(batch.lengths_B, [1, 5, 1, 1])
    assert not batch.finished_B.any()
    m = engine.last_metrics
    assert m["tokens"] == 8 and m["decode_steps"] == 5
    assert m["slot_occupancy"] == pytest.approx(occupancy)
    assert m["slot_occupancy_full_pool"] == pytest.approx(0.8)
    # Keys attended: prompt (5) + tokens so far, per busy row and step.
    keys = (5 + 1) * 3 + sum(5 + k for k in range(1, 6))
    cfg = model.cfg
    per_key = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4  # f32 keys and values
    assert m["live_kv_bytes_per_step"] == pytest.approx(keys * per_key / 5)
    # A free slot attends to its own write slot alone, not its last request's span (r3's,
    # slots 11-31): slot 0 at steps 4-5 in the pool of 2, none in the pool of 1.
    assert m["idle_kv_bytes_per_step"] == pytest.approx((2 - 2 * shrinks) * per_key / 5)


@pytest.mark.parametrize("shrinks,pool_slot_steps", [(0, 6 * 4), (1, 4 + 4 + 4 * 2),
                                                     (2, 4 + 4 + 2 + 3 * 1)])
def test_the_drain_halves_the_pool_when_its_rows_fit(model, shrinks, pool_slot_steps):
  """Slots 4, budgets [2, 6, 1, 3, 1], no EOS. Step 1: r0-r3 (r2 ends); step 2: r4 in
  r2's slot (r0, r4 end). The queue is empty and 2 rows live: from step 3 a pool of 2
  (r3 ends), from step 4 a pool of 1 (r1 alone to step 6). 13 busy slot-steps in 6."""
  params, budgets = SamplingParams(max_new_tokens=8, temperature=1.0, seed=2), [2, 6, 1, 3, 1]
  pool = lambda k: ContinuousSamplerEngine(model, eos_ids=-1, pad_id=PAD, slots=4,
                                           max_prompt_len=16, shrinks=k)
  engine = pool(shrinks)
  batch = engine.generate([[5, 6, 7]], 5, params, budgets=budgets)
  np.testing.assert_array_equal(batch.lengths_B, [2, 6, 1, 3, 1])
  m = engine.last_metrics
  assert m["decode_steps"] == 6
  assert m["slot_occupancy"] == pytest.approx(13 / pool_slot_steps)
  assert m["slot_occupancy_full_pool"] == pytest.approx(13 / 24)
  # The moved rows decode on: the tokens of a pool that never shrinks.
  still = pool(0).generate([[5, 6, 7]], 5, params, budgets=budgets)
  _assert_same(batch, still)


def test_pool_sizes_halve_down_to_one_slot():
  assert pool_sizes(32, 2) == (32, 16, 8)
  assert pool_sizes(5, 9) == (5, 3, 2, 1)
  assert pool_sizes(4, 0) == (4,)


def test_a_static_batch_waits_for_its_longest_row(model):
  """refill=False, same work: r0, r1 decode 5 steps (busy 2, 1, 1, 1, 1), then r2, r3
  one step (busy 2): 8 busy slot-steps of 12."""
  engine = ContinuousSamplerEngine(model, eos_ids=-1, pad_id=PAD, slots=2, max_prompt_len=16,
                                   refill=False)
  batch = engine.generate([[5, 6, 7, 8, 9]], 4, SamplingParams(max_new_tokens=8),
                          budgets=[1, 5, 1, 1])
  np.testing.assert_array_equal(batch.lengths_B, [1, 5, 1, 1])
  assert engine.last_metrics["decode_steps"] == 6
  assert engine.last_metrics["slot_occupancy"] == pytest.approx(8 / 12)  # never shrinks


def test_budgets_are_checked(model):
  engine = _continuous(model, slots=2)
  with pytest.raises(ValueError, match="budgets"):
    engine.generate([[5, 6]], 2, SamplingParams(max_new_tokens=4), budgets=[1, 5])


def test_bf16_compute_prefills_a_group_on_a_cpu(ckpt_root):
  """bf16 weights and compute: a group's prefill scores its queries in one batched dot,
  which XLA's CPU runtime runs only with float32 operands (`backends.einsum_f32`); the
  rows equal those of a pool that prefills each request alone."""
  bf16 = load_hf(tiny_hf.checkpoint("qwen3", ckpt_root).path, dtype=jnp.bfloat16,
                 compute_dtype=jnp.bfloat16)[0]
  params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=2)
  grouped = _continuous(bf16, slots=5).generate(PROMPTS, 2, params)
  alone = _continuous(bf16, slots=5, prefill_group=1).generate(PROMPTS, 2, params)
  assert np.isfinite(grouped.logp_BxL).all()
  _assert_same(grouped, alone)
