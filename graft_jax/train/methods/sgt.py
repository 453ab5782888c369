"""SGT: the GRPO loss plus the NLL of one correct peer response where the receiver failed every sample.

``sgt.prompts`` says where the NLL term may apply: ``'own_failures'`` (SGT as
published: every prompt the receiver failed and the peer solved at least once)
or ``'graft_selected'``, only GRAFT's selected prompts
(`graft.selected_sources`: the receiver failed all n, the peer's group is
mixed, and the prompt survives GRAFT's balancing under ``graft.balance``). The
second is the paper's control "SGT's update on GRAFT's selected prompts"
(arXiv 2609.37868): same prompts as GRAFT, one fixed-weight NLL row in place
of the gated whole peer group. The gate is not part of the selection: it
weighs responses, which is GRAFT's update, not which prompts it chose.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from graft_jax import core
from graft_jax.train.peer_rows import add_own_group, pair_stats, retokenize
from graft_jax.train.methods.base import Method, only_peer, per_receiver
from graft_jax.train.methods.graft import graft_selected
from graft_jax.train.update_rows import KIND_SGT, Rows


def sgt_rows(recv_policy, recv_roll, src_roll, key, selected_G=None):
  """Own groups (plain GRPO) plus one NLL row per prompt, active where the receiver failed
  and the peer did not (and, given ``selected_G``, the prompt is selected); returns
  ``(Rows, ExchangeStats)``."""
  g, n = recv_roll.rewards_GxN.shape
  pick_G, active_G = (np.asarray(x) for x in
                      core.sgt_select(recv_roll.k_G, src_roll.successes_GxN, key))
  if selected_G is not None:
    active_G = active_G & np.asarray(selected_G, bool)
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
  resume_locked = ("sgt", "graft")  # graft.*: sgt.prompts='graft_selected'

  def build_rows(self, policies, rolls, peers, key):
    selected = (graft_selected(rolls, peers, self.cfg)
                if self.cfg.sgt.prompts == "graft_selected" else {})
    return per_receiver(rolls, peers, lambda i, name, srcs: sgt_rows(
        policies[name], rolls[name], only_peer(srcs), jax.random.fold_in(key, 2000 + i),
        selected.get(name)))

  @property
  def loss_fn(self):
    return dataclasses.replace(super().loss_fn, sgt_coef=self.cfg.sgt.coef)

  def order(self):
    """SGT has no peer-last order: its minibatches are a random permutation of the groups.
    The paper (arXiv 2609.37868, its description of GRAFT's update) orders minibatches with
    grafted groups last as part of GRAFT's recipe, so that clipping is active when peer
    tokens arrive; it gives SGT (a fixed-weight NLL on one verified peer success) no order
    of its own. SGT's rows are flagged ``grafted`` to count their tokens apart, and
    ``'peer_last'`` would carry GRAFT's order into the baseline (as for HACPO)."""
    return "uniform"
