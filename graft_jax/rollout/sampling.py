"""One sampling step: temperature, top-k, top-p, and the log-prob the trainer records.

The recorded log-prob is always that of the *unfiltered* tempered distribution,
`log_softmax(logits / T)[token]` (`log_softmax(logits)` when greedy). Top-k and
top-p only choose which tokens may be drawn: they renormalise the draw over the
kept set but do not change the recorded number, so a filtered sample's
recorded log-prob is lower than the log-prob under the distribution actually
drawn from (by log of the kept mass). This matches what `token_logprobs`
gives for the same tokens at the same temperature.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_NEG_INF = -jnp.inf


def filter_top_k(logits_BxV, top_k: int):
  """Keeps the `top_k` largest logits per row (ties at the k-th value are kept)."""
  kth_B1 = jax.lax.top_k(logits_BxV, top_k)[0][:, -1:]
  return jnp.where(logits_BxV < kth_B1, _NEG_INF, logits_BxV)


# Candidates the nucleus is first looked for in: a top-k of this many per row, not a
# sort of the whole vocabulary (151,936 entries for Qwen3) on every decode step.
TOP_P_CANDIDATES = 256


def filter_top_p(logits_BxV, top_p, *, candidates: int = TOP_P_CANDIDATES):
  """Nucleus filter: the smallest set of most likely tokens whose mass reaches `top_p`.

  With s_1 >= s_2 >= ... the logits in descending order and p_i = softmax(s)_i,
  token i is kept when the mass strictly before it, M_i = sum_{j<i} p_j, is
  below `top_p`; so the most likely token always survives. M is nondecreasing,
  so the kept tokens are a prefix s_1..s_L, and the filter keeps every logit
  >= s_L (tokens tied with the last kept one too).

  The prefix is looked for among the ``candidates`` largest logits first
  (`lax.top_k`, in descending order). If their mass M_{K+1} reaches `top_p`
  in every row, then M_i >= M_{K+1} >= top_p for every i > K: nothing past the
  candidates is kept, and s_L is found among them. Otherwise the whole row is
  sorted; its first K masses are the same numbers (the same top-k values,
  normalizer and cumulative sum), and each later mass adds a non-negative sum
  to M_{K+1}, so both branches keep exactly the same tokens.
  """
  k = min(candidates, logits_BxV.shape[-1])
  lse_B1 = jax.scipy.special.logsumexp(logits_BxV, axis=-1, keepdims=True)
  head_BxK = jax.lax.top_k(logits_BxV, k)[0]
  head_p_BxK = jnp.exp(head_BxK - lse_B1)
  head_cum_BxK = jnp.cumsum(head_p_BxK, axis=-1)
  head_before_BxK = head_cum_BxK - head_p_BxK
  head_mass_B1 = head_cum_BxK[:, -1:]

  def last_kept(values_BxN, before_BxN):
    return jnp.min(jnp.where(before_BxN < top_p, values_BxN, jnp.inf), axis=-1, keepdims=True,
                   initial=jnp.inf)

  def whole_rows():
    tail_BxT = jnp.sort(logits_BxV, axis=-1)[:, ::-1][:, k:]
    tail_p_BxT = jnp.exp(tail_BxT - lse_B1)
    tail_before_BxT = head_mass_B1 + (jnp.cumsum(tail_p_BxT, axis=-1) - tail_p_BxT)
    return jnp.minimum(last_kept(head_BxK, head_before_BxK),
                       last_kept(tail_BxT, tail_before_BxT))

  threshold_B1 = jax.lax.cond(jnp.all(head_mass_B1 >= top_p),
                              lambda: last_kept(head_BxK, head_before_BxK), whole_rows)
  return jnp.where(logits_BxV < threshold_B1, _NEG_INF, logits_BxV)


def row_uniforms(key, b: int, row_offset=0, total_rows: int | None = None):
  """One uniform per row, keyed by the row's index in its call: rows ``row_offset ..
  row_offset + b`` take the values the whole call would draw for them, so decoding
  the rows in chunks, or one at a time in a slot pool (`uniforms_at`), samples
  exactly what decoding them together does. ``total_rows`` is kept for callers
  that place a chunk; a row's number does not depend on it."""
  del total_rows
  return uniforms_at(key, row_offset + jnp.arange(b, dtype=jnp.int32))


def uniforms_at(key, rows_B):
  """The uniform of each row ``rows_B[i]`` under ``key`` (one step's key): the
  number that row draws whichever batch, chunk or slot it decodes in."""
  return jax.vmap(lambda r: jax.random.uniform(jax.random.fold_in(key, r)))(rows_B)


def sample_categorical(key, logits_BxV, *, block: int = 128, row_offset=0,
                       total_rows: int | None = None, uniforms_B=None):
  """One draw per row from softmax(logits) (-inf = excluded), by two-level inverse CDF.

  `jax.random.categorical` draws V Gumbel variates per row; on CPU that is
  most of a decode step. This draws one uniform per row (`row_uniforms`): it
  picks a block of `block` tokens by the cumulative block masses, then a
  token inside it. ``uniforms_B`` (default: `row_uniforms`) are those draws.
  """
  b, v = logits_BxV.shape
  p_BxV = jnp.exp(logits_BxV - jnp.max(logits_BxV, axis=-1, keepdims=True))
  p_BxV = jnp.pad(p_BxV, ((0, 0), (0, (-v) % block)))
  nb = p_BxV.shape[1] // block
  p_BxNbxK = p_BxV.reshape(b, nb, block)
  mass_BxNb = p_BxNbxK.sum(axis=-1)
  cum_BxNb = jnp.cumsum(mass_BxNb, axis=-1)
  # u in (0, total]: the first block whose cumulative mass reaches u has mass > 0.
  if uniforms_B is None:
    uniforms_B = row_uniforms(key, b, row_offset, total_rows)
  u_B = (1.0 - uniforms_B) * cum_BxNb[:, -1]
  blk_B = jnp.minimum(jnp.sum(cum_BxNb < u_B[:, None], axis=-1), nb - 1)
  take = lambda x_BxN: jnp.take_along_axis(x_BxN, blk_B[:, None], axis=1)[:, 0]
  rest_B = u_B - (take(cum_BxNb) - take(mass_BxNb))
  p_BxK = jnp.take_along_axis(p_BxNbxK, blk_B[:, None, None], axis=1)[:, 0]
  idx_B = jnp.sum(jnp.cumsum(p_BxK, axis=-1) < rest_B[:, None], axis=-1)
  # Rounding can push `rest` past the block's own sum: fall back to its last
  # token with mass, never to an excluded one.
  last_B = block - 1 - jnp.argmax((p_BxK > 0)[:, ::-1], axis=-1)
  return (blk_B * block + jnp.minimum(idx_B, last_B)).astype(jnp.int32)


def sample_step(key, logits_BxV, temperature, top_p, *, greedy: bool, top_k: int,
                use_top_p: bool, row_offset=0, total_rows: int | None = None,
                uniforms_B=None):
  """Returns (token_B int32, logp_B float32) for fp32 logits.

  `greedy`, `top_k` and `use_top_p` are static (they change the compiled
  program); `temperature` and `top_p` are traced values. `row_offset` and
  `total_rows` place these rows in a larger call (`row_uniforms`); a slot pool
  passes each row's draw as ``uniforms_B`` (`uniforms_at`) instead.
  """
  logits_BxV = logits_BxV.astype(jnp.float32)
  if greedy:
    token_B = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
    logp_BxV = jax.nn.log_softmax(logits_BxV, axis=-1)
  else:
    scaled_BxV = logits_BxV / temperature
    logp_BxV = jax.nn.log_softmax(scaled_BxV, axis=-1)
    filtered_BxV = scaled_BxV
    if top_k:
      filtered_BxV = filter_top_k(filtered_BxV, top_k)
    if use_top_p:
      filtered_BxV = filter_top_p(filtered_BxV, top_p)
    token_B = sample_categorical(key, filtered_BxV, row_offset=row_offset,
                                 total_rows=total_rows, uniforms_B=uniforms_B)
  logp_B = jnp.take_along_axis(logp_BxV, token_B[:, None], axis=-1)[:, 0]
  return token_B, logp_B
