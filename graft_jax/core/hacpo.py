"""HACPO baseline (arXiv 2603.02604): capability-aware advantages and its sequence-level loss.

Follows the reference implementation (zzx-peter/HACRL-code,
``recipe/hacpo/hacpo_core_algos.py``) where the paper leaves a choice open.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def capability_ratio(p_source, p_learner, *, lo: float = 0.1, hi: float = 10.0):
  r""":math:`c = \operatorname{clip}(P_{src} / P_{learner}, lo, hi)`; 1 for the learner's own samples."""
  return jnp.clip(jnp.asarray(p_source, jnp.float32) / jnp.asarray(p_learner, jnp.float32), lo, hi)


def hacpo_advantages(rewards_GxK, is_self_GxK, cap_ratio_GxK, *, scale_by_std: bool = True,
                     eps: float = 1e-6, mask_GxK=None):
  r"""Capability-aware advantages over the pooled group (own and peer samples) of each prompt.

  .. math::
      b_q = \operatorname{mean}_{i \in q} \frac{r_i}{c_i}, \qquad
      A_i = \frac{r_i - b_q}{\operatorname{std}_{i \in q}(r) + \epsilon}

  with :math:`c_i = \operatorname{clip}(P_{src(i)}/P_{learner}, 0.1, 10)`
  (1 for self samples), so a weaker source's successes count for less in the
  baseline. As in the reference code, a group with uniform rewards uses the
  plain mean, and a baseline above 1 falls back to the mean of the learner's
  own rewards. std is ddof = 1 over the pooled group.

  Returns:
    (adv_GxK, baseline_G).
  """
  r = jnp.asarray(rewards_GxK, jnp.float32)
  is_self = jnp.asarray(is_self_GxK, bool)
  c = jnp.where(is_self, 1.0, jnp.asarray(cap_ratio_GxK, jnp.float32))
  m = jnp.ones(r.shape, jnp.float32) if mask_GxK is None else jnp.asarray(mask_GxK, jnp.float32)
  count_G = jnp.maximum(m.sum(axis=1), 1.0)
  mean_G = (r * m).sum(axis=1) / count_G
  weighted_G = (r / c * m).sum(axis=1) / count_G
  r_max_G = jnp.where(m > 0, r, -jnp.inf).max(axis=1)
  r_min_G = jnp.where(m > 0, r, jnp.inf).min(axis=1)
  uniform_G = r_max_G == r_min_G
  self_m = m * is_self
  self_mean_G = (r * self_m).sum(axis=1) / jnp.maximum(self_m.sum(axis=1), 1.0)
  baseline_G = jnp.where(uniform_G, mean_G, weighted_G)
  baseline_G = jnp.where(baseline_G > 1.0, self_mean_G, baseline_G)
  centered = r - baseline_G[:, None]
  if scale_by_std:
    var_G = (((r - mean_G[:, None]) ** 2) * m).sum(axis=1) / jnp.maximum(count_G - 1.0, 1.0)
    centered = centered / (jnp.sqrt(var_G)[:, None] + eps)
  return jnp.where(m > 0, centered, 0.0), baseline_G


def hacpo_policy_loss(target_logp_BxT, mask_BxT, source_mean_logp_B, adv_B, is_self_B,
                      cap_ratio_B, valid_B=None, *, update_index=0,
                      self_clip_low: float = 3e-4, self_clip_high: float = 4e-4,
                      cross_clip_delta: float = 0.2, cross_clip_step: float = 0.025,
                      alpha: float = 1.0):
  r"""HACPO's sequence-level objective, averaged over responses (seq-mean-token-mean).

  .. math::
      s_j = \exp(\bar\ell_\theta(o_j) - \bar\ell_{src}(o_j))

  Self samples take a GSPO-style clip,
  :math:`\min(s_j A_j, \operatorname{clip}(s_j, 1-\epsilon_l, 1+\epsilon_h) A_j)`.
  Cross samples take
  :math:`\tilde s_j \cdot \operatorname{sg}(\tilde s_j)^\alpha \cdot c_j \cdot A_j` with
  :math:`\tilde s_j = \operatorname{clip}(s_j, \min(1, 1-\delta+m\,\delta_{step}), 1)`,
  m the minibatch-update index; as in the reference code, the stop-gradient
  factor is the clipped ratio. Loss is :math:`-\operatorname{mean}_j(\cdot)`
  over valid rows.

  Returns:
    (loss, aux) with ``objective_sum``, ``row_count`` and clip fractions.
  """
  m_BxT = jnp.asarray(mask_BxT, jnp.float32)
  valid = (m_BxT.sum(axis=1) > 0) if valid_B is None else jnp.asarray(valid_B, bool)
  count_B = jnp.maximum(m_BxT.sum(axis=1), 1.0)
  target_mean_B = jnp.where(m_BxT > 0, jnp.asarray(target_logp_BxT, jnp.float32), 0.0).sum(1) / count_B
  log_s = jnp.where(valid, target_mean_B - jax.lax.stop_gradient(source_mean_logp_B), 0.0)
  s_B = jnp.exp(log_s)
  adv_B = jnp.asarray(adv_B, jnp.float32)
  self_clipped = jnp.clip(s_B, 1.0 - self_clip_low, 1.0 + self_clip_high)
  self_obj = jnp.minimum(s_B * adv_B, self_clipped * adv_B)
  lower = jnp.minimum(1.0, 1.0 - cross_clip_delta + update_index * cross_clip_step)
  cross_s = jnp.clip(s_B, lower, 1.0)
  cross_obj = cross_s * jax.lax.stop_gradient(cross_s) ** alpha * cap_ratio_B * adv_B
  is_self = jnp.asarray(is_self_B, bool)
  obj_B = jnp.where(is_self, self_obj, cross_obj)
  v = valid.astype(jnp.float32)
  rows = v.sum()
  safe = jnp.maximum(rows, 1.0)
  objective_sum = (obj_B * v).sum()
  self_v, cross_v = v * is_self, v * (~is_self)
  aux = {
      "objective_sum": objective_sum,
      "row_count": rows,
      "self_clip_frac": ((s_B != self_clipped) * self_v).sum() / jnp.maximum(self_v.sum(), 1.0),
      "cross_clip_lower_frac": ((s_B < lower) * cross_v).sum() / jnp.maximum(cross_v.sum(), 1.0),
      "cross_clip_upper_frac": ((s_B > 1.0) * cross_v).sum() / jnp.maximum(cross_v.sum(), 1.0),
      "seq_ratio_mean": (s_B * v).sum() / safe,
  }
  return -objective_sum / safe, aux


def low_var_kl(logp_BxT, ref_logp_BxT, mask_BxT):
  r"""The low-variance KL estimate to a reference policy (verl's ``low_var_kl``), seq-mean-token-mean.

  .. math::
      k_t = e^{\ell^{ref}_t - \ell_t} - (\ell^{ref}_t - \ell_t) - 1,
      \quad \text{clipped to } [-10, 10]
  """
  m_BxT = jnp.asarray(mask_BxT, jnp.float32)
  diff = jnp.clip(jax.lax.stop_gradient(ref_logp_BxT) - logp_BxT, -20.0, 20.0)
  k_BxT = jnp.clip(jnp.exp(diff) - diff - 1.0, -10.0, 10.0)
  count_B = m_BxT.sum(axis=1)
  row_B = jnp.where(m_BxT > 0, k_BxT, 0.0).sum(axis=1) / jnp.maximum(count_B, 1.0)
  rows = (count_B > 0).astype(jnp.float32)
  return (row_B * rows).sum() / jnp.maximum(rows.sum(), 1.0)
