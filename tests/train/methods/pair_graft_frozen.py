"""GRAFT's pair path as it was before the K-model exchange, frozen for the K = 2 identity test.

This is the receiver-from-one-peer row builder that ``graft_jax.train.methods.graft``
had while GRAFT handled a pair only: the pair rule ``core.select_exchange``
picks the groups and the peer's rows are scored by the receiver per pair. It
is kept verbatim (it only calls library pieces the K-model change left alone)
so the test can check that the K-model path gives the same rows, weights, old
log-probs, gate records and statistics at K = 2.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graft_jax import core
from graft_jax.train.peer_rows import add_own_group, pair_stats, peer_gate_columns
from graft_jax.train.methods.graft import gate
from graft_jax.train.update_rows import Rows
from graft_jax.train.row_logprobs import mean_or_nan, score_rows


def _score_peer_rows(recv_policy, recv_roll, src_roll, row_ids, *, temperature, length_cap):
  finished = src_roll.batch.finished_B
  ids = [recv_policy.encode_response(src_roll.texts[b], bool(finished[b])) for b in row_ids]
  empty = sum(1 for x in ids if not x)
  prompts = [recv_roll.prompt_ids[b // src_roll.n] for b in row_ids]
  logp = score_rows(recv_policy.model, prompts, ids, recv_policy.pad_id,
                    temperature=temperature, length_cap=length_cap) if row_ids else []
  return ids, empty, logp, np.array([mean_or_nan(x) for x in logp], np.float32)


def pair_receives(rolls: dict, cfg) -> dict:
  a, b = rolls
  a_G, b_G = core.select_exchange(rolls[a].k_G, rolls[b].k_G, cfg.n, balance=cfg.graft.balance)
  return {a: np.asarray(a_G), b: np.asarray(b_G)}


def pair_graft_rows(recv_policy, recv_roll, src_roll, receives_G, cfg):
  g, n = recv_roll.rewards_GxN.shape
  gc = cfg.graft
  selected = np.flatnonzero(receives_G)
  peer_rows = [q * n + j for q in selected for j in range(n)]
  ids, empty, old, recv_lbar = _score_peer_rows(
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
  with np.errstate(invalid="ignore", over="ignore"):
    s_R = np.exp(recv_lbar - gen_lbar)
  gate_cols = peer_gate_columns(src_roll.rewards_GxN.size, peer_rows, s_R, keep, w * keep)
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
  return rows, stats, gate_cols
