"""Minibatch order: where the grafted groups go in the step's PPO updates."""

from __future__ import annotations

import jax
import jax.numpy as jnp

ORDERS = ("peer_last", "peer_first", "uniform")


def order_minibatches(grafted_G, num_minibatches: int, *, order: str = "peer_last",
                      key=None):
  """A permutation of the step's G groups, to be cut into equal minibatches.

  ``perm_G.reshape(num_minibatches, G // num_minibatches)`` gives the groups of
  each minibatch, in update order.

  - ``peer_last`` (GRAFT): every grafted group goes after every own group, so
    the grafted ones land in the last minibatches, when the clip is already
    active for the receiver's moved policy.
  - ``peer_first`` (ablation): grafted groups first.
  - ``uniform`` (ablation): a uniformly random permutation from ``key``.

  For ``peer_last`` and ``peer_first``, a ``key`` shuffles the order within
  each class; without one the original order is kept (a stable sort).
  """
  grafted_G = jnp.asarray(grafted_G, bool)
  g = grafted_G.shape[0]
  if num_minibatches < 1 or g % num_minibatches:
    raise ValueError(f"num_minibatches ({num_minibatches}) must divide the group count ({g})")
  if order not in ORDERS:
    raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
  if order == "uniform":
    if key is None:
      raise ValueError("order='uniform' needs a PRNG key")
    return jax.random.permutation(key, g)
  base_G = jnp.arange(g) if key is None else jax.random.permutation(key, g)
  late_G = grafted_G[base_G] if order == "peer_last" else ~grafted_G[base_G]
  return base_G[jnp.argsort(late_G.astype(jnp.int32), stable=True)]
