"""GRAFT's math as pure, jit-able functions: arrays in, arrays out, no Flax and no I/O."""

from graft_jax.core.advantages import group_advantages, pooled_advantages, transfer_mask
from graft_jax.core.exchange import exchange_candidates, select_exchange, select_exchange_k
from graft_jax.core.gate import compat_weights, masked_mean_logp
from graft_jax.core.hacpo import capability_ratio, hacpo_advantages, hacpo_policy_loss, low_var_kl
from graft_jax.core.loss import clipped_token_loss
from graft_jax.core.order import ORDERS, order_minibatches
from graft_jax.core.sgt import sgt_nll, sgt_select

__all__ = [
    "ORDERS",
    "capability_ratio",
    "clipped_token_loss",
    "compat_weights",
    "exchange_candidates",
    "group_advantages",
    "hacpo_advantages",
    "hacpo_policy_loss",
    "low_var_kl",
    "masked_mean_logp",
    "order_minibatches",
    "pooled_advantages",
    "select_exchange",
    "select_exchange_k",
    "sgt_nll",
    "sgt_select",
    "transfer_mask",
]
