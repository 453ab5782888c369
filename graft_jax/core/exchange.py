"""GRAFT's exchange rule: which all-fail groups are replaced by a peer's mixed group.

``select_exchange_k`` is the rule across K models (paper, arXiv 2609.37868,
extended past a pair); ``select_exchange`` is its K = 2 case.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def exchange_candidates(k_recv_G, k_src_G, n: int):
  r"""Prompts where the receiver failed every sample and the source's group is mixed.

  .. math::  C(\text{src} \to \text{recv}) = \{q : k_{recv}(q) = 0,\ 1 \le k_{src}(q) \le n - 1\}
  """
  k_recv_G = jnp.asarray(k_recv_G)
  k_src_G = jnp.asarray(k_src_G)
  return (k_recv_G == 0) & (k_src_G >= 1) & (k_src_G <= n - 1)


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
  source_2xG = select_exchange_k(jnp.stack([jnp.asarray(k_a_G, jnp.int32),
                                            jnp.asarray(k_b_G, jnp.int32)]), n, balance=balance)
  return source_2xG[0] == 1, source_2xG[1] == 0


# One compiled program per (M, G): cheaper than dispatching each op eagerly.
@functools.partial(jax.jit, static_argnames=("n", "balance"))
def select_exchange_k(k_MxG, n: int, *, balance: bool = True):
  r"""Which peer's group each of M models takes, per prompt.

  **Source choice.** For receiver r and prompt q with :math:`k_r(q) = 0` the
  candidates are the peers :math:`p \ne r` with :math:`1 \le k_p(q) \le n-1`;
  the source is the candidate with the largest :math:`k_p(q)`, ties to the
  lowest index; no candidate gives -1.

  **Balancing per pair.** For each unordered pair {r, p} let
  :math:`C(p \to r)` be the prompts whose chosen source for r is p, and

  .. math::  m_{rp} = \min(|C(p \to r)|, |C(r \to p)|).

  Receiver r keeps the top :math:`m_{rp}` of :math:`C(p \to r)` ranked by
  :math:`k_p(q)`, every candidate tied with the m-th kept (as the pair rule);
  :math:`m_{rp} = 0` transfers nothing between r and p. ``balance=False``
  keeps every chosen source. At M = 2 this is ``select_exchange``.

  Args:
    k_MxG: each model's number of correct samples per prompt, in ``[0, n]``.
    n: samples per prompt (static).
    balance: apply the per-pair balancing.

  Returns:
    source_MxG: int32; ``source_MxG[r, q]`` is the model whose group receiver
    r takes for prompt q, or -1.
  """
  k_MxG = jnp.asarray(k_MxG, jnp.int32)
  m_models = k_MxG.shape[0]
  not_self_MxM = ~jnp.eye(m_models, dtype=bool)
  # cand_MxMxG[r, p, q]: p is a candidate source for receiver r on prompt q.
  cand_MxMxG = ((k_MxG[:, None, :] == 0) & not_self_MxM[:, :, None]
                & (k_MxG[None, :, :] >= 1) & (k_MxG[None, :, :] <= n - 1))
  ranked_MxMxG = jnp.where(cand_MxMxG, k_MxG[None, :, :], -1)
  # argmax returns the first maximum: ties go to the lowest index.
  source_MxG = jnp.where(cand_MxMxG.any(axis=1), jnp.argmax(ranked_MxMxG, axis=1), -1)
  if not balance:
    return source_MxG.astype(jnp.int32)
  chosen_MxMxG = source_MxG[:, None, :] == jnp.arange(m_models)[None, :, None]
  count_MxM = chosen_MxMxG.sum(axis=2)
  m_MxM = jnp.minimum(count_MxM, count_MxM.T)
  # Kept iff fewer than m chosen prompts have a strictly larger source count:
  # exactly "k >= the m-th largest", i.e. the top m plus every tie with the m-th.
  k_src_MxMxG = jnp.where(chosen_MxMxG, k_MxG[None, :, :], -1)
  above_MxMxG = (k_src_MxMxG[:, :, None, :] > k_src_MxMxG[:, :, :, None]).sum(axis=3)
  keep_G = (chosen_MxMxG & (above_MxMxG < m_MxM[:, :, None])).any(axis=1)
  return jnp.where(keep_G, source_MxG, -1).astype(jnp.int32)
