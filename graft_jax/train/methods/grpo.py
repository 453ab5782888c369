"""GRPO: each policy trains on its own groups only (any number of policies run side by side)."""

from __future__ import annotations

from graft_jax.train.peer_rows import own_rows, peer_stats
from graft_jax.train.methods.base import Method, per_receiver


class Grpo(Method):
  name = "grpo"
  counts_successes = False  # its peer statistics only report

  def build_rows(self, policies, rolls, peers, key):
    return per_receiver(rolls, peers, lambda i, name, srcs: (own_rows(rolls[name]),
                                                             peer_stats(rolls[name], srcs)))
