"""One step's exchange, laid out row by row: who was all-fail, what the peer sent, how the gate scored it.

``exchange_view`` runs the first half of a GRAFT step (both models' rollouts,
rewards, the balanced selection) with the library's own functions, then
scores *every* peer response under the receiver's behavior policy, not only
the selected groups, so the gate's behaviour can be read per family and per
reward. ``summarize`` folds the rows into the figures the benchmark reports.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graft_jax import core
from graft_jax.train import peer_rows
from graft_jax.train.collect import collect_all


@dataclasses.dataclass(frozen=True)
class PeerRow:
  """One peer response as the receiver sees it."""

  receiver: str
  prompt: str
  family: str
  k_recv: int          # receiver's own correct count on the prompt
  k_peer: int          # peer's correct count on the prompt
  selected: bool       # the balanced selection grafts this prompt's group
  text: str            # the peer's decoded response
  reward: float
  adv: float           # the peer group's own advantage for this response
  gen_tokens: int      # length in the peer's tokenization
  recv_tokens: int     # length after re-tokenization by the receiver
  lbar_gen: float      # mean generation log-prob (peer's tokens)
  lbar_recv: float     # mean log-prob under the receiver's behavior policy
  s: float             # exp(lbar_recv - lbar_gen)
  admitted: bool       # s > delta (and the re-tokenization is non-empty)
  roundtrip: bool      # decode(encode(text)) gives the peer's text back


def exchange_view(cfg, policies: dict, problems, reward_fn, *, seed: int = 0) -> list[PeerRow]:
  """Rows for both directions of one GRAFT exchange on ``problems``.

  Args:
    cfg: a ``TrainConfig`` (n, sampling, delta, balance).
    policies: ``{name: Policy}`` for exactly two models, A first.
    problems: the step's problems (with ``family`` where synthetic).
    reward_fn: ``(texts, golds) -> (rewards, stats)``.
  """
  names = list(policies)
  if len(names) != 2:
    raise ValueError(f"exchange_view needs two policies, got {names}")
  timings: dict = {}
  rolls = collect_all(policies, problems, cfg, reward_fn,
                      {name: seed + i for i, name in enumerate(names)}, timings)
  a, b = names
  a_recv, b_recv = (np.asarray(x) for x in core.select_exchange(
      rolls[a].k_G, rolls[b].k_G, cfg.n, balance=cfg.graft.balance))
  rows = []
  for recv_name, src_name, receives_G in ((a, b, a_recv), (b, a, b_recv)):
    recv, src, policy = rolls[recv_name], rolls[src_name], policies[recv_name]
    n = cfg.n
    rows_idx = list(range(len(problems) * n))
    ids, _, _, lbar_recv = peer_rows.score_peer_rows(policy, recv, src, rows_idx,
                                                    temperature=cfg.rollout.temperature)
    _, admitted = core.compat_weights(lbar_recv, src.gen_mean_logp_B, delta=cfg.graft.delta)
    admitted = np.asarray(admitted)
    for r in rows_idx:
      q, j = divmod(r, n)
      text = src.texts[r]
      rows.append(PeerRow(
          receiver=recv_name, prompt=problems[q].problem,
          family=getattr(problems[q], "family", ""), k_recv=int(recv.k_G[q]),
          k_peer=int(src.k_G[q]), selected=bool(receives_G[q]), text=text,
          reward=float(src.rewards_GxN[q, j]), adv=float(src.adv_GxN[q, j]),
          gen_tokens=len(src.response_ids[r]), recv_tokens=len(ids[r]),
          lbar_gen=float(src.gen_mean_logp_B[r]), lbar_recv=float(lbar_recv[r]),
          s=float(np.exp(lbar_recv[r] - src.gen_mean_logp_B[r])), admitted=bool(admitted[r]),
          roundtrip=policy.decode(ids[r]).strip() == text.strip()))
  return rows


def summarize(rows: list[PeerRow], delta: float) -> dict:
  """Per receiver: selection, admission by reward, s quantiles, re-tokenization survival."""
  out = {}
  for recv in dict.fromkeys(r.receiver for r in rows):
    mine = [r for r in rows if r.receiver == recv]
    sel = [r for r in mine if r.selected]
    s_sel = np.array([r.s for r in sel]) if sel else np.zeros(0)
    prompts = {r.prompt: r for r in mine}
    fails = [r for r in prompts.values() if r.k_recv == 0]
    entry = {
        "prompts": len(prompts),
        "all_fail": len(fails),
        "peer_solves_all_fail": sum(1 for r in fails if r.k_peer > 0),
        "selected_groups": len({r.prompt for r in sel}),
        "offered": len(sel),
        "admitted": sum(r.admitted for r in sel),
        "admitted_correct": sum(r.admitted and r.reward > 0 for r in sel),
        "offered_correct": sum(r.reward > 0 for r in sel),
        "roundtrip_share": float(np.mean([r.roundtrip for r in mine])) if mine else float("nan"),
        "delta": delta,
    }
    for label, subset in (("s_selected", s_sel),
                          ("s_correct", np.array([r.s for r in sel if r.reward > 0])),
                          ("s_wrong", np.array([r.s for r in sel if r.reward == 0])),
                          ("s_all", np.array([r.s for r in mine]))):
      if subset.size:
        entry[label] = {f"p{p}": float(np.percentile(subset, p)) for p in (10, 50, 90)}
    out[recv] = entry
  return out
