"""SGT: the GRPO loss plus the NLL of one correct peer response where the receiver failed every sample."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from graft_jax import core
from graft_jax.train.peer_rows import add_own_group, pair_stats, retokenize
from graft_jax.train.methods.base import Method, only_peer, per_receiver
from graft_jax.train.update_rows import KIND_SGT, Rows


def sgt_rows(recv_policy, recv_roll, src_roll, key):
  """Own groups (plain GRPO) plus one NLL row per prompt, active where the receiver failed
  and the peer did not; returns ``(Rows, ExchangeStats)``."""
  g, n = recv_roll.rewards_GxN.shape
  pick_G, active_G = (np.asarray(x) for x in
                      core.sgt_select(recv_roll.k_G, src_roll.rewards_GxN, key))
  picked = [q * n + int(pick_G[q]) for q in range(g) if active_G[q]]
  ids, empty = retokenize(recv_policy, src_roll, picked)
  by_q = dict(zip(np.flatnonzero(active_G).tolist(), ids))
  rows = Rows()
  for q in range(g):
    add_own_group(rows, recv_roll, q)
    rows.add(recv_roll.prompt_ids[q], by_q.get(q, []), q, kind=KIND_SGT,
             keep=q in by_q, grafted=q in by_q)
  stats = dataclasses.replace(pair_stats(recv_roll, src_roll), sgt_active=int(active_G.sum()),
                              dropped_empty=empty)
  return rows, stats


class Sgt(Method):
  name = "sgt"
  pair_only = True

  def build_rows(self, policies, rolls, peers, key):
    return per_receiver(rolls, peers, lambda i, name, srcs: sgt_rows(
        policies[name], rolls[name], only_peer(srcs), jax.random.fold_in(key, 2000 + i)))

  @property
  def loss_fn(self):
    return dataclasses.replace(super().loss_fn, sgt_coef=self.cfg.sgt.coef)
