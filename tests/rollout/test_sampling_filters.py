"""Top-k / top-p filters and the recorded log-prob of one sampling step."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_jax.rollout.sampling import (filter_top_k, filter_top_p, sample_categorical,
                                       sample_step)


def test_top_k_keeps_the_k_largest():
  logits = jnp.array([[0.0, 3.0, 1.0, 2.0]])
  kept = np.isfinite(np.asarray(filter_top_k(logits, 2)))
  np.testing.assert_array_equal(kept, [[False, True, False, True]])


def test_top_p_keeps_the_smallest_set_reaching_p():
  probs = np.array([[0.5, 0.3, 0.15, 0.05]])
  logits = jnp.log(jnp.asarray(probs))
  keep = lambda p: np.isfinite(np.asarray(filter_top_p(logits, p)))[0].tolist()
  assert keep(0.5) == [True, False, False, False]
  assert keep(0.51) == [True, True, False, False]
  assert keep(0.81) == [True, True, True, False]
  assert keep(1.0) == [True, True, True, True]


# float32 logits without subnormals: XLA on CPU flushes them to zero, so
# 4e-42 and 0.0 would be one logit to the filter and two to NumPy.
_LOGITS = st.lists(st.floats(-5, 5, width=32, allow_subnormal=False), min_size=2, max_size=12)


@settings(max_examples=30, deadline=None)
@given(_LOGITS, st.floats(0.05, 1.0))
def test_top_p_set_is_minimal_and_reaches_p(values, top_p):
  # Judged in float64 from the float32 logits the filter sees. Ties are ties of
  # logits: float32 softmax can round distinct logits (0 and 1e-8) to equal
  # probabilities, and the filter keeps the larger logit, a most likely token.
  logits = np.asarray(values, np.float32)
  kept = np.isfinite(np.asarray(filter_top_p(jnp.asarray(logits[None]), top_p)))[0]
  probs = np.exp(logits.astype(np.float64) - logits.max())
  probs /= probs.sum()
  # Every token tied with the largest logit is kept.
  assert kept[logits == logits.max()].all()
  # The kept set is everything at or above its smallest logit (ties kept together).
  threshold = logits[kept].min()
  np.testing.assert_array_equal(kept, logits >= threshold)
  # It reaches top_p (up to float32 rounding of the filter's cumulative sum) ...
  assert probs[kept].sum() >= top_p - 1e-5 or kept.all()
  # ... and is minimal: the tokens strictly above its tied tail stay below top_p.
  assert probs[logits > threshold].sum() < top_p + 1e-5


def test_recorded_logp_is_of_the_unfiltered_tempered_distribution():
  logits = jnp.asarray(np.random.default_rng(0).normal(size=(64, 10)), jnp.float32)
  token, logp = sample_step(jax.random.key(0), logits, 0.7, 0.5, greedy=False, top_k=3,
                            use_top_p=True)
  want = jax.nn.log_softmax(logits / 0.7)[jnp.arange(64), token]
  np.testing.assert_allclose(logp, want, rtol=1e-6)
  top3 = np.argsort(-np.asarray(logits), axis=1)[:, :3]
  assert all(t in row for t, row in zip(np.asarray(token), top3))


def test_greedy_records_plain_log_softmax():
  logits = jnp.asarray([[0.0, 2.0, 1.0]])
  token, logp = sample_step(jax.random.key(0), logits, 1.0, 1.0, greedy=True, top_k=0,
                            use_top_p=False)
  assert int(token[0]) == 1
  np.testing.assert_allclose(logp, jax.nn.log_softmax(logits)[:, 1], rtol=1e-6)


def test_categorical_frequencies_match_probabilities():
  # 300 tokens span three blocks; two are excluded (-inf) and must never come up.
  rng = np.random.default_rng(0)
  logits = rng.normal(size=300).astype(np.float32) * 2
  logits[[5, 250]] = -np.inf
  draws = np.asarray(jax.jit(sample_categorical)(
      jax.random.key(0), jnp.broadcast_to(jnp.asarray(logits), (40000, 300))))
  probs = np.asarray(jax.nn.softmax(jnp.asarray(logits)))
  freq = np.bincount(draws, minlength=300) / len(draws)
  assert freq[5] == 0 and freq[250] == 0
  # Within 5 binomial standard deviations for every token.
  sd = np.sqrt(probs * (1 - probs) / len(draws))
  assert np.all(np.abs(freq - probs) <= 5 * sd + 1e-4)
