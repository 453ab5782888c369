"""Group-relative advantages: GRPO, Dr.GRPO, and the pooled / success-only ablations."""

from __future__ import annotations

import jax.numpy as jnp


def _masked_group_stats(rewards_GxN, mask_GxN):
  """Per-group mean and ddof=1 std over the members selected by ``mask``."""
  m = mask_GxN.astype(rewards_GxN.dtype)
  count_G = m.sum(axis=1)
  mean_G = (rewards_GxN * m).sum(axis=1) / jnp.maximum(count_G, 1.0)
  sq_G = (((rewards_GxN - mean_G[:, None]) ** 2) * m).sum(axis=1)
  std_G = jnp.sqrt(sq_G / jnp.maximum(count_G - 1.0, 1.0))
  return mean_G, std_G


def group_advantages(rewards_GxN, *, scale_by_std: bool = True, eps: float = 1e-6,
                     mask_GxN=None):
  r"""GRPO advantage of every response, relative to its own prompt's group.

  .. math::
      A_{ij} = \frac{r_{ij} - \operatorname{mean}_j r_{ij}}
                    {\operatorname{std}_j r_{ij} + \epsilon}

  with the sample standard deviation (ddof = 1), as verl and Tunix compute it.
  ``scale_by_std=False`` drops the denominator (Dr.GRPO): ``A = r - mean r``.
  All-fail and all-pass groups get ``A = 0``: such a prompt carries no
  reward-based gradient, which is the failure GRAFT repairs.

  Args:
    rewards_GxN: rewards of ``N`` responses for each of ``G`` prompts.
    scale_by_std: divide by the group std (GRPO) or not (Dr.GRPO).
    eps: added to the std.
    mask_GxN: optional membership mask; masked-out members neither enter the
      statistics nor receive an advantage (they get 0). Groups with fewer
      than two members get ``A = 0``.

  Returns:
    adv_GxN, float32.
  """
  rewards_GxN = jnp.asarray(rewards_GxN, jnp.float32)
  if rewards_GxN.ndim != 2:
    raise ValueError(f"rewards_GxN must be 2-D, got shape {rewards_GxN.shape}")
  if mask_GxN is None:
    if rewards_GxN.shape[1] < 2:
      raise ValueError("group_advantages needs at least 2 responses per group (ddof=1)")
    mask_GxN = jnp.ones(rewards_GxN.shape, bool)
  mask_GxN = jnp.asarray(mask_GxN, bool)
  mean_G, std_G = _masked_group_stats(rewards_GxN, mask_GxN)
  centered_GxN = rewards_GxN - mean_G[:, None]
  if scale_by_std:
    centered_GxN = centered_GxN / (std_G[:, None] + eps)
  big_enough_G = mask_GxN.sum(axis=1) >= 2
  return jnp.where(mask_GxN & big_enough_G[:, None], centered_GxN, 0.0)


def pooled_advantages(own_rewards_GxN, peer_rewards_GxM, *, scale_by_std: bool = True,
                      eps: float = 1e-6, own_mask_GxN=None, peer_mask_GxM=None):
  r"""Advantages over the union of the receiver's and the peer's groups.

  The ``pooled`` ablation: instead of carrying the advantages the source
  computed on its own group, the statistics are taken over both groups,

  .. math::
      A_i = \frac{r_i - \operatorname{mean}_{U} r}{\operatorname{std}_{U} r + \epsilon},
      \qquad U = \text{own group} \cup \text{peer group}.

  Returns:
    (own_adv_GxN, peer_adv_GxM). GRAFT's pooled ablation keeps ``peer_adv``
    for the grafted responses (the receiver's own group is still replaced).
  """
  own_rewards_GxN = jnp.asarray(own_rewards_GxN, jnp.float32)
  peer_rewards_GxM = jnp.asarray(peer_rewards_GxM, jnp.float32)
  n = own_rewards_GxN.shape[1]
  if own_mask_GxN is None:
    own_mask_GxN = jnp.ones(own_rewards_GxN.shape, bool)
  if peer_mask_GxM is None:
    peer_mask_GxM = jnp.ones(peer_rewards_GxM.shape, bool)
  union_GxK = jnp.concatenate([own_rewards_GxN, peer_rewards_GxM], axis=1)
  union_mask_GxK = jnp.concatenate([jnp.asarray(own_mask_GxN, bool),
                                    jnp.asarray(peer_mask_GxM, bool)], axis=1)
  adv_GxK = group_advantages(union_GxK, scale_by_std=scale_by_std, eps=eps,
                             mask_GxN=union_mask_GxK)
  return adv_GxK[:, :n], adv_GxK[:, n:]


def transfer_mask(peer_rewards_GxN, *, transfer: str = "full"):
  """Which of the peer's responses a grafted group carries.

  ``full`` (GRAFT) keeps the whole mixed group, wrong answers included, so the
  within-group contrast survives. ``success_only`` (ablation) keeps only the
  correct responses; their advantages stay the ones the source computed on its
  full group.
  """
  peer_rewards_GxN = jnp.asarray(peer_rewards_GxN)
  if transfer == "full":
    return jnp.ones(peer_rewards_GxN.shape, bool)
  if transfer == "success_only":
    return peer_rewards_GxN > 0
  raise ValueError(f"transfer must be 'full' or 'success_only', got {transfer!r}")
