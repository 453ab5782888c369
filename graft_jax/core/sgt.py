"""SGT baseline: an NLL term on one verified peer success when the receiver failed every sample."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def sgt_select(k_recv_G, peer_rewards_GxN, key):
  r"""Pick one correct peer response per prompt where SGT applies.

  SGT applies on prompt q when the receiver has 0/n correct and the peer at
  least one: :math:`k_{recv}(q) = 0 \wedge k_{peer}(q) \ge 1`. The response is
  drawn uniformly among the peer's correct ones.

  Returns:
    (pick_G, active_G): int32 index into the peer's group, and the bool mask
    of prompts where the term is active (``pick`` is meaningless elsewhere).
  """
  peer_rewards_GxN = jnp.asarray(peer_rewards_GxN, jnp.float32)
  correct_GxN = peer_rewards_GxN > 0
  active_G = (jnp.asarray(k_recv_G) == 0) & correct_GxN.any(axis=1)
  scores_GxN = jnp.where(correct_GxN, jax.random.uniform(key, correct_GxN.shape), -1.0)
  return jnp.argmax(scores_GxN, axis=1).astype(jnp.int32), active_G


def sgt_nll(logp_BxT, mask_BxT, active_B, *, coef: float = 0.1):
  r"""The SGT term :math:`c \cdot \mathrm{NLL}`, token-mean over the active rows.

  .. math::
      L_{SGT} = -c \, \frac{\sum_{j \in \text{active}} \sum_t \log\pi_\theta(o_{j,t})}
                         {\sum_{j \in \text{active}} |o_j|}

  It is added to the receiver's GRPO loss; with no active row it is 0.

  Returns:
    (loss, token_count).
  """
  m_BxT = jnp.asarray(mask_BxT, jnp.float32) * jnp.asarray(active_B, jnp.float32)[:, None]
  count = m_BxT.sum()
  nll_sum = -(jnp.where(m_BxT > 0, jnp.asarray(logp_BxT, jnp.float32), 0.0)).sum()
  return coef * nll_sum / jnp.maximum(count, 1.0), count
