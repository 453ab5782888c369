"""GRAFT: each selected all-fail group is replaced by the peer's whole group, gated by s.

The pair rule (``graft_jax.core.select_exchange``) picks the groups; the
peer's responses are re-tokenized and scored by the receiver, which gives the
gate's lbar_recv and the PPO old log-probs; the gate weights
w = 1[s > delta] min(s, 1) ride on the rows (paper, arXiv 2609.37868).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graft_jax import core
from graft_jax.train.exchange import add_own_group, pair_stats, peer_gate_columns, score_peer_rows
from graft_jax.train.methods.base import Method, per_receiver
from graft_jax.train.rows import Rows


def gate(recv_lbar_R, gen_lbar_R, ids, g: int, n: int, gc):
  """(w_R, admitted_R) of the offered rows under ``graft.gate``."""
  if gc.gate == "on":
    # Gated at the fixed length g * n (NaN pads, never admitted), so a step with a
    # new number of peer rows compiles nothing.
    pad = lambda x: np.pad(x, (0, g * n - len(x)), constant_values=np.nan)
    return (np.asarray(x)[:len(ids)] for x in core.compat_weights(
        pad(recv_lbar_R), pad(gen_lbar_R), delta=gc.delta))
  admitted = np.array([len(x) > 0 for x in ids], bool)
  return admitted.astype(np.float32), admitted


def graft_rows(recv_policy, recv_roll, src_roll, receives_G, cfg):
  """Own groups, with each group ``receives_G`` selects replaced by the peer's whole group;
  returns ``(Rows, ExchangeStats)``. Records the gate on ``src_roll.peer_gate``."""
  g, n = recv_roll.rewards_GxN.shape
  gc = cfg.graft
  selected = np.flatnonzero(receives_G)
  peer_rows = [q * n + j for q in selected for j in range(n)]
  ids, empty, old, recv_lbar = score_peer_rows(
      recv_policy, recv_roll, src_roll, peer_rows, temperature=cfg.rollout.temperature,
      length_cap=cfg.max_prompt_len + cfg.max_response_len)
  gen_lbar = src_roll.gen_mean_logp_B[peer_rows] if peer_rows else np.zeros(0, np.float32)
  finite = np.isfinite(recv_lbar) & np.isfinite(gen_lbar)
  w, admitted = gate(recv_lbar, gen_lbar, ids, g, n, gc)
  if gc.advantages == "pooled":
    _, src_adv = core.pooled_advantages(recv_roll.rewards_GxN, src_roll.rewards_GxN,
                                        scale_by_std=cfg.scale_by_std)
    src_adv = np.asarray(src_adv)
  else:
    src_adv = src_roll.adv_GxN
  carried = np.asarray(core.transfer_mask(src_roll.rewards_GxN, transfer=gc.transfer))
  keep = admitted & carried.reshape(-1)[peer_rows]
  with np.errstate(invalid="ignore", over="ignore"):  # a non-finite s stays NaN / inf in the log
    s_R = np.exp(recv_lbar - gen_lbar)
  src_roll.peer_gate = peer_gate_columns(src_roll.rewards_GxN.size, peer_rows, s_R, keep,
                                         w * keep)
  stats = dataclasses.replace(
      pair_stats(recv_roll, src_roll), grafted_groups=int(np.sum(receives_G)),
      peer_offered=len(peer_rows), dropped_empty=empty,
      dropped_nonfinite=int((~finite).sum()) - empty, admitted=int(keep.sum()),
      s_R=np.exp(recv_lbar[finite] - gen_lbar[finite]))
  rows = Rows()
  slot = {b: i for i, b in enumerate(peer_rows)}
  for q in range(g):
    if not receives_G[q]:
      add_own_group(rows, recv_roll, q)
      continue
    for j in range(n):
      i = slot[q * n + j]
      rows.add(recv_roll.prompt_ids[q], ids[i], q, adv=src_adv[q, j], weight=w[i],
               keep=bool(admitted[i]) and bool(carried[q, j]), grafted=True,
               old_logp=old[i])
  return rows, stats


class Graft(Method):
  name = "graft"

  def receives(self, rolls: dict, peers: dict) -> dict:
    """Which prompts each receiver takes from its peer: the balanced pair rule."""
    if not peers:
      return {}
    a, b = rolls
    a_G, b_G = core.select_exchange(rolls[a].k_G, rolls[b].k_G, self.cfg.n,
                                    balance=self.cfg.graft.balance)
    return {a: np.asarray(a_G), b: np.asarray(b_G)}

  def build_rows(self, policies, rolls, peers, key):
    receives = self.receives(rolls, peers)
    return per_receiver(rolls, peers, lambda i, name, src: graft_rows(
        policies[name], rolls[name], src, receives[name], self.cfg))

  def step_metrics(self, built):
    """m, the balancing count: the smaller of the two directions' candidate counts."""
    stats = [s for _, s in built.values() if s is not None]
    return {"m": int(min(s.candidates for s in stats))} if stats else {}

  def loss(self, g):
    return dataclasses.replace(super().loss(g), ratio_level=self.cfg.graft.ratio_level)

  def order(self):
    return self.cfg.graft.order
