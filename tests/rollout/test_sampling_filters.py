"""Top-k / top-p filters and the recorded log-prob of one sampling step."""

import jax
import jax.extend
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


def _nucleus_float64(logits_V, top_p):
  """The kept tokens by the definition, in float64 NumPy: a whole-vocabulary sort."""
  order = np.argsort(-logits_V.astype(np.float64), kind="stable")
  p = np.exp(logits_V[order].astype(np.float64) - logits_V.max())
  p /= p.sum()
  before = np.cumsum(p) - p
  last = logits_V[order][before < top_p].min()
  return logits_V >= last


def _peaked_and_flat_rows(rng, v):
  """Rows whose nucleus is a few tokens (peaked) and rows where it is hundreds (flat)."""
  peaked = rng.normal(size=(3, v)) * 0.5
  peaked[np.arange(3), rng.integers(0, v, 3)] += 12.0
  flat = rng.normal(size=(2, v)) * 0.3
  return peaked.astype(np.float32), flat.astype(np.float32)


def test_top_p_among_candidates_keeps_what_the_whole_sort_keeps():
  # 2,000 tokens and 16 candidates: peaked rows end inside the candidates, flat rows
  # far past them; both agree with the float64 whole-vocabulary definition.
  rng = np.random.default_rng(7)
  peaked, flat = _peaked_and_flat_rows(rng, 2000)
  for rows in (peaked, flat, np.concatenate([peaked, flat])):
    kept = np.isfinite(np.asarray(
        jax.jit(lambda x: filter_top_p(x, 0.9, candidates=16))(jnp.asarray(rows))))
    for got, row in zip(kept, rows):
      want = _nucleus_float64(row, 0.9)
      assert want.sum() == got.sum() and (want == got).all(), (want.sum(), got.sum())
  assert max(_nucleus_float64(r, 0.9).sum() for r in peaked) <= 16
  assert min(_nucleus_float64(r, 0.9).sum() for r in flat) > 16


def test_a_row_keeps_the_same_tokens_whichever_branch_its_batch_takes():
  # A peaked row alone takes the candidates' branch; beside a flat row its batch sorts
  # whole rows. The pool and the static sampler batch rows differently, so the two
  # branches must keep bit-identical sets.
  rng = np.random.default_rng(11)
  for _ in range(5):
    peaked, flat = _peaked_and_flat_rows(rng, 3000)
    f = jax.jit(lambda x: filter_top_p(x, 0.95, candidates=8))
    alone = np.asarray(f(jnp.asarray(peaked)))
    mixed = np.asarray(f(jnp.asarray(np.concatenate([peaked, flat]))))[:3]
    np.testing.assert_array_equal(alone, mixed)


def _primitives(jaxpr) -> set:
  """Every primitive in ``jaxpr``, nested jits included, cond branches left out."""
  names = set()
  for e in jaxpr.eqns:
    names.add(e.primitive.name)
    if e.primitive.name != "cond":
      for sub in jax.extend.core.jaxprs_in_params(e.params):
        names |= _primitives(sub)
  return names


def test_top_p_sorts_the_vocabulary_only_when_the_candidates_fall_short():
  jaxpr = jax.make_jaxpr(lambda x: filter_top_p(x, 0.9, candidates=16))(
      jnp.zeros((4, 1000), jnp.float32)).jaxpr
  outside = _primitives(jaxpr)
  assert "sort" not in outside and {"top_k", "cond"} <= outside
  cond = next(e for e in jaxpr.eqns if e.primitive.name == "cond")
  sorts = ["sort" in _primitives(b.jaxpr) for b in cond.params["branches"]]
  assert sorted(sorts) == [False, True]
