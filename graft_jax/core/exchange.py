"""GRAFT's exchange rule: which all-fail groups are replaced by the peer's mixed group."""

from __future__ import annotations

import jax.numpy as jnp


def exchange_candidates(k_recv_G, k_src_G, n: int):
  r"""Prompts where the receiver failed every sample and the source's group is mixed.

  .. math::  C(\text{src} \to \text{recv}) = \{q : k_{recv}(q) = 0,\ 1 \le k_{src}(q) \le n - 1\}
  """
  k_recv_G = jnp.asarray(k_recv_G)
  k_src_G = jnp.asarray(k_src_G)
  return (k_recv_G == 0) & (k_src_G >= 1) & (k_src_G <= n - 1)


def _top_m_with_ties(cand_G, k_src_G, m):
  """Candidates whose source count is at least the m-th largest among candidates.

  Keeping ``k >= k_(m)`` is exactly "the top m plus every candidate tied with
  the m-th"; with ``m == 0`` nothing is kept.
  """
  ranked_G = jnp.where(cand_G, k_src_G, -1)
  sorted_desc_G = -jnp.sort(-ranked_G)
  cutoff = sorted_desc_G[jnp.clip(m - 1, 0, ranked_G.shape[0] - 1)]
  return cand_G & (m > 0) & (k_src_G >= cutoff)


def select_exchange(k_a_G, k_b_G, n: int, *, balance: bool = True):
  r"""Which prompts' groups are replaced, in each direction.

  Candidates for receiver A from source B are
  :math:`C(B \to A) = \{q : k_A(q) = 0,\ 1 \le k_B(q) \le n-1\}`, and
  symmetrically for B. With balancing,

  .. math::  m = \min(|C(B \to A)|, |C(A \to B)|)

  and each direction ranks its candidates by the *source's* success count
  (higher first) and keeps the top m plus every candidate tied with the m-th,
  so a direction may keep more than m and the two may differ. ``m = 0``
  transfers nothing in either direction. With ``balance=False`` (one-way
  stored-log replay) every candidate is kept.

  Args:
    k_a_G: A's number of correct samples per prompt, in ``[0, n]``.
    k_b_G: B's number of correct samples per prompt.
    n: samples per prompt (static).
    balance: apply the min-count balancing.

  Returns:
    (a_receives_G, b_receives_G): bool; ``a_receives[q]`` means A's group for
    q is replaced by B's.
  """
  k_a_G = jnp.asarray(k_a_G, jnp.int32)
  k_b_G = jnp.asarray(k_b_G, jnp.int32)
  a_cand_G = exchange_candidates(k_a_G, k_b_G, n)
  b_cand_G = exchange_candidates(k_b_G, k_a_G, n)
  if not balance:
    return a_cand_G, b_cand_G
  m = jnp.minimum(a_cand_G.sum(), b_cand_G.sum())
  return _top_m_with_ties(a_cand_G, k_b_G, m), _top_m_with_ties(b_cand_G, k_a_G, m)
