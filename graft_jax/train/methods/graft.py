"""GRAFT: each selected all-fail group is replaced by a peer's whole group, gated by s.

The exchange rule across the run's models (``graft_jax.core.select_exchange_k``;
at two models the pair rule) picks, per receiver and prompt, the peer whose
group it takes. The peers' responses are re-tokenized and scored by the
receiver in one call whichever peer they come from, which gives the gate's
lbar_recv and the PPO old log-probs; the gate weights w = 1[s > delta] min(s, 1)
ride on the rows (paper, arXiv 2609.37868).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graft_jax import core
from graft_jax.train.peer_rows import add_own_group, peer_gate_columns, peer_stats, score_picks
from graft_jax.train.methods.base import Method, per_receiver
from graft_jax.train.update_rows import Rows


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


def _source_columns(recv_roll, src_roll, cfg):
  """(advantages_GxN, carried_GxN) the receiver takes with the source's groups."""
  gc = cfg.graft
  if gc.advantages == "pooled":
    _, src_adv = core.pooled_advantages(recv_roll.rewards_GxN, src_roll.rewards_GxN,
                                        scale_by_std=cfg.scale_by_std)
    src_adv = np.asarray(src_adv)
  else:
    src_adv = src_roll.adv_GxN
  return src_adv, np.asarray(core.transfer_mask(src_roll.successes_GxN, transfer=gc.transfer))


def _gate_stats(base, idx, ids, recv_lbar, gen_lbar, keep, groups: int):
  """``base`` with what the gate did to the offered rows ``idx``."""
  idx = np.asarray(idx, np.int64)
  finite = np.isfinite(recv_lbar[idx]) & np.isfinite(gen_lbar[idx])
  empty = sum(1 for i in idx if not ids[i])
  return dataclasses.replace(
      base, grafted_groups=groups, peer_offered=len(idx), dropped_empty=empty,
      dropped_nonfinite=int((~finite).sum()) - empty, admitted=int(keep[idx].sum()),
      s_R=np.exp(recv_lbar[idx][finite] - gen_lbar[idx][finite]))


def graft_rows(recv_policy, recv_roll, peers: dict, sources_G, cfg):
  """Own groups, with each group q whose ``sources_G[q]`` names a peer replaced by that
  peer's whole group; returns ``(Rows, ExchangeStats)``.

  ``peers`` maps peer names to their rollouts; ``sources_G[q]`` is a peer name
  or None (the receiver keeps its own group). Every offered row, whichever
  peer it comes from, is scored in one call. Records the gate on each peer's
  ``peer_gate``; past one peer the statistics break down by source.
  """
  g, n = recv_roll.rewards_GxN.shape
  picks = [(sources_G[q], q * n + j) for q in range(g) if sources_G[q] is not None
           for j in range(n)]
  ids, _, old, recv_lbar = score_picks(
      recv_policy, recv_roll, [(peers[s], b) for s, b in picks],
      temperature=cfg.rollout.temperature, length_cap=cfg.max_prompt_len + cfg.max_response_len)
  gen_lbar = np.array([peers[s].gen_mean_logp_B[b] for s, b in picks], np.float32)
  w, admitted = gate(recv_lbar, gen_lbar, ids, g, n, cfg.graft)
  columns = {name: _source_columns(recv_roll, src, cfg) for name, src in peers.items()}
  carried_R = np.array([bool(columns[s][1].flat[b]) for s, b in picks], bool)
  keep = admitted & carried_R
  with np.errstate(invalid="ignore", over="ignore"):  # a non-finite s stays NaN / inf in the log
    s_R = np.exp(recv_lbar - gen_lbar)
  by_peer = {name: [i for i, (s, _) in enumerate(picks) if s == name] for name in peers}
  for name, src in peers.items():
    idx = by_peer[name]
    src.peer_gate = peer_gate_columns(src.rewards_GxN.size, [picks[i][1] for i in idx],
                                      s_R[idx], keep[idx], (w * keep)[idx],
                                      receiver=recv_policy.name, before=src.peer_gate)
  total = _gate_stats(peer_stats(recv_roll, peers), range(len(picks)), ids, recv_lbar, gen_lbar,
                      keep, sum(s is not None for s in sources_G))
  if total.pairs:
    chosen_G = _chosen_sources(recv_roll, peers, cfg.n)
    total.pairs = {name: dataclasses.replace(
        _gate_stats(base, by_peer[name], ids, recv_lbar, gen_lbar, keep,
                    sum(s == name for s in sources_G)), chosen=sum(s == name for s in chosen_G))
                   for name, base in total.pairs.items()}
  rows = Rows()
  slot = {b: i for i, (_, b) in enumerate(picks)}
  for q in range(g):
    src = sources_G[q]
    if src is None:
      add_own_group(rows, recv_roll, q)
      continue
    adv_GxN, carried_GxN = columns[src]
    for j in range(n):
      i = slot[q * n + j]
      rows.add(recv_roll.prompt_ids[q], ids[i], q, adv=adv_GxN[q, j], weight=w[i],
               keep=bool(admitted[i]) and bool(carried_GxN[q, j]), grafted=True,
               old_logp=old[i])
  return rows, total


def _chosen_sources(recv_roll, peers: dict, n: int) -> list:
  """The receiver's chosen source per prompt before balancing (a peer name or None)."""
  names = list(peers)
  k_MxG = np.stack([recv_roll.k_G] + [p.k_G for p in peers.values()])
  source_G = np.asarray(core.select_exchange_k(k_MxG, n, balance=False))[0]
  return [names[s - 1] if s > 0 else None for s in source_G]


def selected_sources(rolls: dict, n: int, *, balance: bool) -> dict:
  """GRAFT's selected prompts: per receiver, its source per prompt (a peer name, or None
  where it keeps its own group), by the K-model exchange rule
  (``core.select_exchange_k``): the receiver failed all n samples, the source's group
  is mixed, and, with ``balance``, the prompt survives the per-pair balancing. The
  compatibility gate is not part of it: it weighs the chosen group's responses."""
  names = list(rolls)
  source_MxG = np.asarray(core.select_exchange_k(
      np.stack([rolls[name].k_G for name in names]), n, balance=balance))
  return {names[r]: [names[s] if s >= 0 else None for s in source_MxG[r]]
          for r in range(len(names))}


def graft_selected(rolls: dict, peers: dict, cfg) -> dict:
  """``{receiver: selected_G}`` (bool): the prompts `selected_sources` picks under
  ``cfg.graft.balance``, for a baseline's update restricted to GRAFT's prompts."""
  if not peers:
    return {}
  sources = selected_sources(rolls, cfg.n, balance=cfg.graft.balance)
  return {name: np.array([s is not None for s in sources[name]], bool) for name in peers}


class Graft(Method):
  name = "graft"
  resume_locked = ("graft",)
  peer_scoring = "picked"

  def receives(self, rolls: dict, peers: dict) -> dict:
    """Each receiver's source per prompt (a peer name or None): the K-model rule."""
    if not peers:
      return {}
    return selected_sources(rolls, self.cfg.n, balance=self.cfg.graft.balance)

  def build_rows(self, policies, rolls, peers, key):
    receives = self.receives(rolls, peers)
    return per_receiver(rolls, peers, lambda i, name, srcs: graft_rows(
        policies[name], rolls[name], srcs, receives[name], self.cfg))

  def step_metrics(self, built):
    """m, the balancing count of each pair of models: the smaller of the two directions'
    candidate counts (``m``; past two models ``m/<a>/<b>``, from the sources chosen)."""
    stats = {name: s for name, (_, s) in built.items() if s is not None}
    if not stats:
      return {}
    if not any(s.pairs for s in stats.values()):
      return {"m": int(min(s.candidates for s in stats.values()))}
    names = list(stats)
    return {"m": {f"{a}/{b}": int(min(stats[a].pairs[b].chosen, stats[b].pairs[a].chosen))
                  for i, a in enumerate(names) for b in names[i + 1:]}}

  @property
  def loss_fn(self):
    return dataclasses.replace(super().loss_fn, ratio_level=self.cfg.graft.ratio_level)

  def order(self):
    return self.cfg.graft.order
