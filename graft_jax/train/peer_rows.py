"""What every method's row building shares: own groups, peer rows in the receiver's
tokenization, and the statistics of an exchange (``ExchangeStats``).

Peer responses cross as *text*: they are re-tokenized by the receiver
(``Policy.encode_response``; EOS only when the peer finished) and scored by
the receiver's behavior policy, which gives both the gate's lbar_recv and the
old log-probs of the PPO ratio. A finished response of EOS alone comes across as
the receiver's EOS (a wrong answer keeps its row and advantage); an unfinished
response without text re-tokenizes to nothing, and such empty rows and
non-finite scores are dropped and counted.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graft_jax import core
from graft_jax.train.update_rows import KIND_PPO, Rows
from graft_jax.train.row_logprobs import mean_or_nan, score_rows


def add_own_group(rows: Rows, roll, q: int, adv_N=None, kind: int = KIND_PPO) -> None:
  n = roll.n
  adv_N = roll.adv_GxN[q] if adv_N is None else adv_N
  for j in range(n):
    b = q * n + j
    rows.add(roll.prompt_ids[q], roll.response_ids[b], q, adv=adv_N[j], kind=kind,
             old_logp=roll.old_logp[b], old_logp_pending=roll.old_logp_pending_B[b])


def own_rows(roll) -> Rows:
  """The receiver's own groups, unchanged (GRPO)."""
  rows = Rows()
  for q in range(roll.rewards_GxN.shape[0]):
    add_own_group(rows, roll, q)
  return rows


def retokenize(recv_policy, src_roll, row_ids):
  """Peer rows ``row_ids`` in the receiver's tokenization, and how many came out empty."""
  ids = [_encode(recv_policy, src_roll, b) for b in row_ids]
  return ids, sum(1 for x in ids if not x)


def _encode(recv_policy, src_roll, b: int) -> list:
  return recv_policy.encode_response(src_roll.texts[b], bool(src_roll.batch.finished_B[b]))


def score_peer_rows(recv_policy, recv_roll, src_roll, row_ids, *, temperature: float,
                    length_cap: int = 0):
  """Peer rows ``row_ids`` of one peer re-tokenized by the receiver and scored by its
  behavior policy (``score_picks`` of ``(src_roll, row)`` for each row)."""
  return score_picks(recv_policy, recv_roll, [(src_roll, b) for b in row_ids],
                     temperature=temperature, length_cap=length_cap)


def score_picks(recv_policy, recv_roll, picks, *, temperature: float, length_cap: int = 0):
  """Peer rows re-tokenized by the receiver and scored by its behavior policy in one call.

  ``picks`` lists ``(source rollout, row)`` pairs, from any number of peers.
  Returns ``(ids, empty, logp, lbar_R)``: the receiver's token ids per row, how
  many came out empty, the receiver's log-probs over them (the PPO old
  log-probs), and their per-row means (the gate's lbar_recv; NaN when empty).
  """
  ids = [_encode(recv_policy, src, b) for src, b in picks]
  prompts = [recv_roll.prompt_ids[b // src.n] for src, b in picks]
  logp = score_rows(recv_policy.model, prompts, ids, recv_policy.pad_id,
                    temperature=temperature, length_cap=length_cap) if picks else []
  return (ids, sum(1 for x in ids if not x), logp,
          np.array([mean_or_nan(x) for x in logp], np.float32))


def complementarity(k_recv_G, k_src_G) -> float:
  """Share of the receiver's all-fail prompts on which the peer solved at least one."""
  fail = k_recv_G == 0
  return float((fail & (k_src_G >= 1)).sum() / fail.sum()) if fail.any() else float("nan")


def peer_gate_columns(num_rows: int, peer_rows, s_R, admitted_R, weight_R, *,
                      receiver: str | None = None, before: dict | None = None) -> dict:
  """The source's per-response record of a graft, for its peer log: ``offered``, ``s``,
  ``admitted``, ``weight`` over all ``num_rows`` responses (NaN / False where not offered),
  and, given the ``receiver``'s name, ``receivers`` (`receivers_column`).

  ``before``: the record another receiver of the same step already made (K > 2
  models); the rows it offered keep its entries, so the four columns hold the first
  receiver's (in model order) gate of a response offered to several, and
  ``receivers`` every receiver's.
  """
  cols = dict(offered=np.zeros(num_rows, bool), s=np.full(num_rows, np.nan, np.float32),
              admitted=np.zeros(num_rows, bool), weight=np.full(num_rows, np.nan, np.float32))
  for name, value in (("offered", True), ("s", s_R), ("admitted", admitted_R),
                      ("weight", weight_R)):
    cols[name][list(peer_rows)] = value
  if before is not None:
    taken = np.asarray(before["offered"], bool)
    cols = {k: np.where(taken, before[k], v) for k, v in cols.items()}
  if receiver is not None:
    cols["receivers"] = receivers_column(num_rows, receiver, peer_rows, s_R, admitted_R,
                                         weight_R, before=(before or {}).get("receivers"))
  return cols


def receivers_column(num_rows: int, receiver: str, peer_rows, s_R, admitted_R, weight_R, *,
                     before: list | None = None) -> list[list[dict]]:
  """Every receiver's record of each response, for the source's peer log: per row, one
  ``{receiver, s, admitted, weight}`` per receiver it was offered to, in model order.

  The four other columns of `peer_gate_columns` keep the first receiver's entries; with
  K > 2 models a response can go to several receivers, and this column keeps them
  all. ``before``: the column another receiver of the same step already made.
  """
  out = [list(r) for r in before] if before is not None else [[] for _ in range(num_rows)]
  for b, s, admitted, weight in zip(peer_rows, s_R, admitted_R, weight_R):
    out[b].append(dict(receiver=receiver, s=float(s), admitted=bool(admitted),
                       weight=float(weight)))
  return out


@dataclasses.dataclass
class ExchangeStats:
  """What one receiver's exchange with its peer did in a step (``<name>/exchange/...``).

  Fields a method does not produce stay None and are not logged. ``s_R``
  holds the finite gate scores s of the offered rows; the log gets their
  mean (NaN when none) and 10/50/90th percentiles.
  """

  complementarity: float
  candidates: int
  grafted_groups: int | None = None
  sgt_active: int | None = None
  peer_offered: int | None = None
  dropped_empty: int | None = None
  dropped_nonfinite: int | None = None
  admitted: int | None = None
  cap_ratio: float | None = None
  s_R: np.ndarray | None = None
  # K > 2 models: |C(p -> r)|, the prompts whose chosen source is this peer (before
  # balancing), and the breakdown by source peer (``<name>/exchange/from/<peer>/...``).
  chosen: int | None = None
  pairs: dict[str, "ExchangeStats"] | None = None

  def metrics(self) -> dict:
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
           if f.name not in ("s_R", "pairs") and getattr(self, f.name) is not None}
    if self.pairs:
      out["from"] = {peer: stats.metrics() for peer, stats in self.pairs.items()}
    if self.s_R is not None:
      out["s_mean"] = float(self.s_R.mean()) if self.s_R.size else float("nan")
      if self.s_R.size:
        s_R = self.s_R.astype(np.float64)
        out.update({f"s_p{p}": float(np.percentile(s_R, p)) for p in (10, 50, 90)})
    return out


def pair_stats(recv_roll, src_roll) -> ExchangeStats:
  """The statistics every pair has: complementarity and the receiver's candidate count."""
  cand_G = core.exchange_candidates(recv_roll.k_G, src_roll.k_G, recv_roll.n)
  return ExchangeStats(complementarity=complementarity(recv_roll.k_G, src_roll.k_G),
                       candidates=int(np.asarray(cand_G).sum()))


def peer_stats(recv_roll, peers: dict) -> ExchangeStats:
  """``pair_stats`` against every peer together, with the breakdown per peer past one.

  Together: complementarity is the share of the receiver's all-fail prompts
  some peer solved at least once; candidates are the prompts with at least
  one candidate source. With one peer this is ``pair_stats``.
  """
  if len(peers) == 1:
    return pair_stats(recv_roll, *peers.values())
  k_PxG = np.stack([p.k_G for p in peers.values()])
  cand_G = np.asarray(core.exchange_candidates(recv_roll.k_G[None], k_PxG, recv_roll.n)).any(0)
  return ExchangeStats(complementarity=complementarity(recv_roll.k_G, k_PxG.max(0)),
                       candidates=int(cand_G.sum()),
                       pairs={name: pair_stats(recv_roll, p) for name, p in peers.items()})
