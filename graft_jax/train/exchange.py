"""Building a receiver's update rows: its own groups, plus what each method takes from the peer.

Peer responses cross as *text*: they are re-tokenized by the receiver
(``Policy.encode_response``; EOS only when the peer finished) and scored by
the receiver's behavior policy, which gives both the gate's lbar_recv and the
old log-probs of the PPO ratio. Empty re-tokenizations and non-finite scores
are dropped and counted.
"""

from __future__ import annotations

import numpy as np

from graft_jax import core
from graft_jax.train.rows import KIND_SGT, Rows
from graft_jax.train.scoring import mean_or_nan, score_rows


def add_own_group(rows: Rows, roll, q: int, adv_N=None) -> None:
  n = roll.n
  adv_N = roll.adv_GxN[q] if adv_N is None else adv_N
  for j in range(n):
    b = q * n + j
    rows.add(roll.prompt_ids[q], roll.response_ids[b], q, adv=adv_N[j],
             old_logp=roll.old_logp[b], src_mean_logp=mean_or_nan(roll.old_logp[b]))


def retokenize(recv_policy, src_roll, row_ids):
  """Peer rows ``row_ids`` in the receiver's tokenization, and how many came out empty."""
  finished = src_roll.batch.finished_B
  ids = [recv_policy.encode_response(src_roll.texts[b], bool(finished[b])) for b in row_ids]
  return ids, sum(1 for x in ids if not x)


def score_peer_rows(recv_policy, recv_roll, src_roll, row_ids, *, temperature: float,
                    length_cap: int = 0):
  """Peer rows ``row_ids`` re-tokenized by the receiver and scored by its behavior policy.

  Returns ``(ids, empty, logp, lbar_R)``: the receiver's token ids per row, how
  many came out empty, the receiver's log-probs over them (the PPO old
  log-probs), and their per-row means (the gate's lbar_recv; NaN when empty).
  """
  ids, empty = retokenize(recv_policy, src_roll, row_ids)
  n = src_roll.n
  prompts = [recv_roll.prompt_ids[b // n] for b in row_ids]
  logp = score_rows(recv_policy.model, prompts, ids, recv_policy.pad_id,
                    temperature=temperature, length_cap=length_cap) if row_ids else []
  return ids, empty, logp, np.array([mean_or_nan(x) for x in logp], np.float32)


def complementarity(k_recv_G, k_src_G) -> float:
  """Share of the receiver's all-fail prompts on which the peer solved at least one."""
  fail = k_recv_G == 0
  return float((fail & (k_src_G >= 1)).sum() / fail.sum()) if fail.any() else float("nan")


def peer_gate_columns(num_rows: int, peer_rows, s_R, admitted_R, weight_R) -> dict:
  """The source's per-response record of a graft, for its peer log: ``offered``, ``s``,
  ``admitted``, ``weight`` over all ``num_rows`` responses (NaN / False where not offered)."""
  cols = dict(offered=np.zeros(num_rows, bool), s=np.full(num_rows, np.nan, np.float32),
              admitted=np.zeros(num_rows, bool), weight=np.full(num_rows, np.nan, np.float32))
  for name, value in (("offered", True), ("s", s_R), ("admitted", admitted_R),
                      ("weight", weight_R)):
    cols[name][list(peer_rows)] = value
  return cols


def graft_rows(recv_policy, recv_roll, src_roll, receives_G, cfg, counts: dict) -> Rows:
  """GRAFT: own groups, with each selected all-fail group replaced by the peer's whole group."""
  g, n = recv_roll.rewards_GxN.shape
  gc = cfg.graft
  selected = np.flatnonzero(receives_G)
  peer_rows = [q * n + j for q in selected for j in range(n)]
  ids, empty, old, recv_lbar = score_peer_rows(
      recv_policy, recv_roll, src_roll, peer_rows, temperature=cfg.rollout.temperature,
      length_cap=cfg.max_prompt_len + cfg.max_response_len)
  gen_lbar = src_roll.gen_mean_logp_B[peer_rows] if peer_rows else np.zeros(0, np.float32)
  finite = np.isfinite(recv_lbar) & np.isfinite(gen_lbar)
  if gc.gate == "on":
    # Gated at the fixed length g * n (NaN pads, never admitted), so a step with a
    # new number of peer rows compiles nothing.
    pad = lambda x: np.pad(x, (0, g * n - len(x)), constant_values=np.nan)
    w, admitted = (np.asarray(x)[:len(peer_rows)] for x in core.compat_weights(
        pad(recv_lbar), pad(gen_lbar), delta=gc.delta))
  else:
    admitted = np.array([len(x) > 0 for x in ids], bool)
    w = admitted.astype(np.float32)
  if gc.advantages == "pooled":
    _, src_adv = core.pooled_advantages(recv_roll.rewards_GxN, src_roll.rewards_GxN,
                                        scale_by_std=cfg.scale_by_std)
    src_adv = np.asarray(src_adv)
  else:
    src_adv = src_roll.adv_GxN
  carried = np.asarray(core.transfer_mask(src_roll.rewards_GxN, transfer=gc.transfer))
  s = np.exp(recv_lbar[finite] - gen_lbar[finite])
  keep = admitted & carried.reshape(-1)[peer_rows]
  with np.errstate(invalid="ignore", over="ignore"):  # a non-finite s stays NaN / inf in the log
    s_R = np.exp(recv_lbar - gen_lbar)
  src_roll.peer_gate = peer_gate_columns(src_roll.rewards_GxN.size, peer_rows, s_R, keep,
                                         w * keep)
  counts.update(peer_offered=len(peer_rows), dropped_empty=empty,
                dropped_nonfinite=int((~finite).sum()) - empty,
                admitted=int(keep.sum()),
                s_mean=float(s.mean()) if s.size else float("nan"),
                s_values=s.tolist())
  rows = Rows()
  slot = {b: i for i, b in enumerate(peer_rows)}
  for q in range(g):
    if not receives_G[q]:
      add_own_group(rows, recv_roll, q)
      continue
    for j in range(n):
      b, i = q * n + j, slot[q * n + j]
      rows.add(recv_roll.prompt_ids[q], ids[i], q, adv=src_adv[q, j], weight=w[i],
               keep=bool(admitted[i]) and bool(carried[q, j]), grafted=True,
               old_logp=old[i])
  return rows


def sgt_rows(recv_policy, recv_roll, src_roll, key, cfg, counts: dict) -> Rows:
  """SGT: own groups (plain GRPO) plus one NLL row per prompt, active where it failed and the peer did not."""
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
  counts.update(sgt_active=int(active_G.sum()), dropped_empty=empty)
  return rows


def hacpo_rows(recv_policy, recv_roll, src_roll, cap_ratio: float, cfg, counts: dict) -> Rows:
  """HACPO: every prompt pools the receiver's n and the peer's n responses."""
  g, n = recv_roll.rewards_GxN.shape
  all_rows = list(range(g * n))
  ids, empty, old, _ = score_peer_rows(recv_policy, recv_roll, src_roll, all_rows,
                                      temperature=cfg.rollout.temperature,
                                      length_cap=cfg.max_prompt_len + cfg.max_response_len)
  r_GxK = np.concatenate([recv_roll.rewards_GxN, src_roll.rewards_GxN], axis=1)
  is_self_GxK = np.concatenate([np.ones((g, n), bool), np.zeros((g, n), bool)], axis=1)
  cap_GxK = np.where(is_self_GxK, 1.0, cap_ratio).astype(np.float32)
  adv_GxK, _ = core.hacpo_advantages(r_GxK, is_self_GxK, cap_GxK, scale_by_std=cfg.scale_by_std)
  adv_GxK = np.asarray(adv_GxK)
  src_mean = src_roll.old_mean_logp_B
  rows = Rows()
  for q in range(g):
    add_own_group(rows, recv_roll, q, adv_N=adv_GxK[q, :n])
    for j in range(n):
      b = q * n + j
      finite = np.isfinite(src_mean[b]) and len(ids[b]) > 0
      rows.add(recv_roll.prompt_ids[q], ids[b], q, adv=adv_GxK[q, n + j], keep=finite,
               grafted=True, is_self=False, src_mean_logp=src_mean[b] if finite else 0.0,
               cap_ratio=cap_ratio, old_logp=old[b])
  counts.update(peer_offered=g * n, dropped_empty=empty, cap_ratio=cap_ratio)
  return rows
