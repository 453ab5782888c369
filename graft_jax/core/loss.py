"""The GRAFT / GRPO policy loss: asymmetric PPO clip with DAPO-style token-mean aggregation."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _sequence_log_ratio(log_ratio_BxT, m_BxT):
  """Mean token log-ratio of each row, broadcast back over its tokens."""
  count_B = m_BxT.sum(axis=1)
  seq_B = (log_ratio_BxT * m_BxT).sum(axis=1) / jnp.maximum(count_B, 1.0)
  return jnp.broadcast_to(seq_B[:, None], log_ratio_BxT.shape)


def clipped_token_loss(logp_BxT, old_logp_BxT, adv_B, weight_B, mask_BxT, *,
                       clip_low: float = 0.2, clip_high: float = 0.28,
                       ratio_level: str = "token", num_tokens=None):
  r"""Weighted, asymmetrically clipped surrogate, averaged over all retained tokens.

  .. math::
      \rho_{j,t} = \frac{\pi_\theta(o_{j,t})}{\pi_{\text{old}}(o_{j,t})}, \qquad
      L = -\frac{1}{\sum_j |o_j|} \sum_j w_j \sum_t
          \min\bigl(\rho_{j,t} A_j,\ \operatorname{clip}(\rho_{j,t}, 1-\epsilon_l, 1+\epsilon_h) A_j\bigr)

  Both the receiver's own and grafted responses are scored in the receiver's
  tokenization, and :math:`\pi_\text{old}` is the receiver's behavior policy,
  never the generator's. The weights sit in the numerator only; the
  denominator counts every unmasked token, unweighted. A dropped response must
  therefore have its mask zeroed (its tokens then leave the denominator too).
  No KL and no entropy term.

  ``ratio_level="sequence"`` (ablation) uses one ratio per response,
  :math:`\rho_j = \exp(\frac{1}{|o_j|}\sum_t \log\rho_{j,t})`, for all its tokens.

  Args:
    logp_BxT: current-policy log-probs of the response tokens.
    old_logp_BxT: behavior-policy log-probs of the same tokens (no gradient).
    adv_B: advantage of each response.
    weight_B: gate weight of each response (1 for own responses).
    mask_BxT: 1 on retained response tokens.
    clip_low, clip_high: the asymmetric clip range (DAPO clip-higher).
    ratio_level: "token" or "sequence".
    num_tokens: the denominator; defaults to ``mask.sum()``. Pass the whole
      minibatch's count when a minibatch is split into micro-batches or over
      devices, so that summed micro-batch losses equal the minibatch loss.

  Returns:
    (loss, aux). ``aux`` holds sums and counts (``loss_sum``, ``token_count``,
    ``clip_low_count_B``, ``clip_high_count_B``, ``ratio_sum``, ``kl_sum``)
    so callers can aggregate exactly, plus the fractions ``clip_frac_low``,
    ``clip_frac_high``, ``ratio_mean`` and ``approx_kl`` (k3 estimator of
    KL(old || current)) over this batch.
  """
  if ratio_level not in ("token", "sequence"):
    raise ValueError(f"ratio_level must be 'token' or 'sequence', got {ratio_level!r}")
  m_BxT = jnp.asarray(mask_BxT, jnp.float32)
  logp_BxT = jnp.asarray(logp_BxT, jnp.float32)
  old_logp_BxT = jax.lax.stop_gradient(jnp.asarray(old_logp_BxT, jnp.float32))
  adv_B = jnp.asarray(adv_B, jnp.float32)
  weight_B = jnp.asarray(weight_B, jnp.float32)

  # Masked positions may hold padding garbage; zero them before exp.
  log_ratio_BxT = jnp.where(m_BxT > 0, logp_BxT - old_logp_BxT, 0.0)
  if ratio_level == "sequence":
    log_ratio_BxT = _sequence_log_ratio(log_ratio_BxT, m_BxT)
  ratio_BxT = jnp.exp(log_ratio_BxT)
  adv_BxT = adv_B[:, None]
  surr_BxT = ratio_BxT * adv_BxT
  surr_clipped_BxT = jnp.clip(ratio_BxT, 1.0 - clip_low, 1.0 + clip_high) * adv_BxT
  objective_BxT = jnp.minimum(surr_BxT, surr_clipped_BxT)

  token_count = m_BxT.sum()
  denom = token_count if num_tokens is None else jnp.asarray(num_tokens, jnp.float32)
  loss_sum = -(weight_B[:, None] * objective_BxT * m_BxT).sum()
  loss = loss_sum / jnp.maximum(denom, 1.0)

  # The clipped branch is the active (gradient-free) one exactly here.
  clip_low_BxT = (adv_BxT < 0) & (ratio_BxT < 1.0 - clip_low) & (m_BxT > 0)
  clip_high_BxT = (adv_BxT > 0) & (ratio_BxT > 1.0 + clip_high) & (m_BxT > 0)
  kl_BxT = (ratio_BxT - 1.0) - log_ratio_BxT
  safe = jnp.maximum(token_count, 1.0)
  ratio_sum = (ratio_BxT * m_BxT).sum()
  kl_sum = (kl_BxT * m_BxT).sum()
  aux = {
      "loss_sum": loss_sum,
      "token_count": token_count,
      "clip_low_count_B": clip_low_BxT.sum(axis=1),
      "clip_high_count_B": clip_high_BxT.sum(axis=1),
      "ratio_sum": ratio_sum,
      "kl_sum": kl_sum,
      "clip_frac_low": clip_low_BxT.sum() / safe,
      "clip_frac_high": clip_high_BxT.sum() / safe,
      "ratio_mean": ratio_sum / safe,
      "approx_kl": kl_sum / safe,
  }
  return loss, aux
