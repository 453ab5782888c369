"""HACPO (arXiv 2603.02604): every prompt pools the receiver's and the peer's responses.

The peer's rewards enter the receiver's baseline weighted by the capability
ratio P_learner / P_source (``graft_jax.train.capability``, carried across
steps and checkpointed); the loss is HACPO's sequence-level one with a KL to
the initial parameters.

``hacpo.prompts``: ``'all'`` (HACPO as published: every prompt pools both
groups, whether or not the receiver already has a signal) or
``'graft_selected'``: only GRAFT's selected prompts
(`graft.selected_sources`: the receiver failed all n, the peer's group is
mixed, and the prompt survives GRAFT's balancing under ``graft.balance``) pool
the peer's group under HACPO's advantages and loss; every other prompt keeps
the receiver's own group alone under GRPO's advantages and clipped token loss
(`HacpoOnSelectedLoss`), as GRAFT and SGT on GRAFT's prompts train there. The
control then differs from GRAFT only in how it treats the selected prompts,
not in its loss on the model's own prompts. The second is the paper's control
"HACPO's update on GRAFT's selected prompts" (arXiv 2609.37868). The gate is
not part of the selection: it weighs responses inside GRAFT's update, not
which prompts it chose.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import flax.struct
import jax
import numpy as np
from flax import nnx

from graft_jax import core
from graft_jax.config.errors import ConfigError
from graft_jax.outputs import metric_kinds as kinds
from graft_jax.train.capability import CapabilityTracker
from graft_jax.train.methods.base import (ClippedTokenLoss, Method, PpoBatch, only_peer,
                                          per_receiver, sequence_counts, whole_minibatch_mean)
from graft_jax.train.methods.graft import graft_selected
from graft_jax.train.old_logprobs import score_rollout
from graft_jax.train.peer_rows import add_own_group, pair_stats, score_peer_rows
from graft_jax.train.row_logprobs import mean_or_nan, score_rows
from graft_jax.train.update_rows import KIND_HACPO, KIND_PPO, RowColumn, Rows


# HACPO's own row columns (`Rows.extra`), given on the peer's rows: whose sample a row is,
# the generator's mean log-prob (on the receiver's own rows, the mean of their old
# log-probs as they stand when packed, rescored or not), and the capability ratio.
HACPO_COLUMNS = (RowColumn("is_self", np.bool_, True),
                 RowColumn("src_mean_logp", np.float32, lambda rows, i: (
                     0.0 if rows.old_logp[i] is None else mean_or_nan(rows.old_logp[i]))),
                 RowColumn("cap_ratio", np.float32, 1.0))


@flax.struct.dataclass
class HacpoBatch:
  """The rows of HACPO's loss: per token (B x T) and per row (B)."""

  ROW_COLUMNS = HACPO_COLUMNS

  ids: jax.Array
  attn: jax.Array
  resp_mask: jax.Array
  ref_logp: jax.Array
  adv: jax.Array
  is_self: jax.Array
  src_mean_logp: jax.Array
  cap_ratio: jax.Array


@dataclasses.dataclass(frozen=True)
class HacpoLoss:
  """HACPO's sequence-level loss plus ``kl_coef`` times the low-variance KL to the
  reference (hashable and static, as ``ClippedTokenLoss``)."""

  Batch: ClassVar[type] = HacpoBatch
  temperature: float = 1.0
  self_clip: tuple = (3e-4, 4e-4)
  cross_clip: float = 0.2
  cross_step: float = 0.025
  kl_coef: float = 0.0

  def __call__(self, logp_BxT, batch: HacpoBatch, totals: dict, update_index):
    """Both terms are means over the whole minibatch's rows (``totals['num_rows']``)."""
    mask_BxT = batch.resp_mask
    loss, aux = core.hacpo_policy_loss(
        logp_BxT, mask_BxT, batch.src_mean_logp, batch.adv, batch.is_self, batch.cap_ratio,
        update_index=update_index, self_clip_low=self.self_clip[0],
        self_clip_high=self.self_clip[1], cross_clip_delta=self.cross_clip,
        cross_clip_step=self.cross_step)
    kl = core.low_var_kl(logp_BxT, batch.ref_logp, mask_BxT)
    loss, kl = (whole_minibatch_mean(x, aux["row_count"], totals["num_rows"]) for x in (loss, kl))
    fractions = ("self_clip_frac", "cross_clip_lower_frac", "cross_clip_upper_frac",
                 "seq_ratio_mean")
    return loss + self.kl_coef * kl, {
        **kinds.metrics(kinds.MEAN, pg_loss=loss, kl_ref=kl, row_count=aux["row_count"]),
        **kinds.metrics(kinds.POOLED, objective_sum=aux["objective_sum"]),
        **kinds.metrics(kinds.FRACTION, **{k: aux[k] for k in fractions}),
        **sequence_counts(batch.attn)}

  def has_signal(self, batch: HacpoBatch) -> np.ndarray:
    """Every row: the KL to the reference moves whatever the advantage."""
    return np.ones(len(batch.ids), bool)

  def totals(self, batch: HacpoBatch) -> dict:
    return {"num_rows": np.float32((np.asarray(batch.resp_mask).sum(axis=1) > 0).sum())}

  def units(self, batch: HacpoBatch) -> np.ndarray:
    """1 per row with a response token (the sequence mean's units)."""
    return (np.asarray(batch.resp_mask).sum(axis=1) > 0).astype(np.float32)


@flax.struct.dataclass
class HacpoGrpoBatch(HacpoBatch):
  """The rows of `HacpoOnSelectedLoss`: HACPO's fields and the clipped token loss's;
  ``ppo`` is 1 on the rows under GRPO's loss, 0 on HACPO's."""

  old_logp: jax.Array
  weight: jax.Array
  grafted: jax.Array
  ppo: jax.Array


@dataclasses.dataclass(frozen=True)
class HacpoOnSelectedLoss:
  """HACPO's loss (`HacpoLoss`) over the rows of the selected prompts plus GRPO's clipped
  token loss over the rest (``ppo`` rows). Each term is normalized over its own rows of
  the whole minibatch (HACPO's rows, GRPO's tokens) and the two are added, as SGT adds
  its NLL term to GRPO's loss."""

  Batch: ClassVar[type] = HacpoGrpoBatch
  hacpo: HacpoLoss = HacpoLoss()
  grpo: ClippedTokenLoss = ClippedTokenLoss()

  @property
  def temperature(self) -> float:
    """The sampling temperature the log-probs are taken at (both terms share it)."""
    return self.grpo.temperature

  @staticmethod
  def split(batch: HacpoGrpoBatch) -> tuple[HacpoBatch, PpoBatch]:
    """(HACPO's rows, GRPO's rows): the same arrays, each with the other's masked out."""
    ppo_B = batch.ppo
    hacpo = HacpoBatch(ids=batch.ids, attn=batch.attn,
                       resp_mask=batch.resp_mask * (1 - ppo_B)[:, None], ref_logp=batch.ref_logp,
                       adv=batch.adv, is_self=batch.is_self, src_mean_logp=batch.src_mean_logp,
                       cap_ratio=batch.cap_ratio)
    grpo = PpoBatch(ids=batch.ids, attn=batch.attn, resp_mask=batch.resp_mask,
                    old_logp=batch.old_logp, adv=batch.adv, weight=batch.weight,
                    grafted=batch.grafted, ppo=ppo_B, sgt=ppo_B * 0)
    return hacpo, grpo

  def __call__(self, logp_BxT, batch: HacpoGrpoBatch, totals: dict, update_index):
    hacpo, grpo = self.split(batch)
    h_loss, h_aux = self.hacpo(logp_BxT, hacpo, totals, update_index)
    g_loss, g_aux = self.grpo(logp_BxT, grpo, totals, update_index)
    shared = ("pg_loss", "seq_tokens", "seq_tokens_sq_sum")  # the sequences: counted once
    pg_loss = h_aux["pg_loss"].value + g_aux["pg_loss"].value
    return h_loss + g_loss, {**{k: v for k, v in h_aux.items() if k not in shared}, **g_aux,
                             **kinds.metrics(kinds.MEAN, pg_loss=pg_loss)}

  def has_signal(self, batch: HacpoGrpoBatch) -> np.ndarray:
    hacpo, grpo = self.split(batch)
    return (np.asarray(batch.ppo) == 0) | self.grpo.has_signal(grpo)

  def totals(self, batch: HacpoGrpoBatch) -> dict:
    hacpo, grpo = self.split(batch)
    return {**self.hacpo.totals(hacpo), **self.grpo.totals(grpo)}

  def units(self, batch: HacpoGrpoBatch) -> np.ndarray:
    """GRPO's tokens on its rows, 1 per HACPO row."""
    hacpo, grpo = self.split(batch)
    return self.hacpo.units(hacpo) + self.grpo.units(grpo)


def hacpo_rows(recv_policy, recv_roll, src_roll, cap_ratio: float, cfg, selected_G=None):
  """The receiver's n and the peer's n responses of every prompt, with HACPO's
  capability-weighted advantages; returns ``(Rows, ExchangeStats)``. Given
  ``selected_G``, only the selected prompts' rows are HACPO's (``KIND_HACPO``): elsewhere
  the receiver's group keeps its GRPO advantages under GRPO's loss and the peer's n
  slots stay empty."""
  g, n = recv_roll.rewards_GxN.shape
  pooled_G = np.ones(g, bool) if selected_G is None else np.asarray(selected_G, bool)
  offered = [q * n + j for q in np.flatnonzero(pooled_G) for j in range(n)]
  length_cap = cfg.max_prompt_len + cfg.max_response_len
  got, empty, got_old, _ = score_peer_rows(recv_policy, recv_roll, src_roll, offered,
                                           temperature=cfg.rollout.temperature,
                                           length_cap=length_cap)
  ids, old = [[]] * (g * n), [None] * (g * n)
  for i, b in enumerate(offered):
    ids[b], old[b] = got[i], got_old[i]
  r_GxK = np.concatenate([recv_roll.rewards_GxN, src_roll.rewards_GxN], axis=1)
  is_self_GxK = np.concatenate([np.ones((g, n), bool), np.zeros((g, n), bool)], axis=1)
  cap_GxK = np.where(is_self_GxK, 1.0, cap_ratio).astype(np.float32)
  mask_GxK = is_self_GxK | pooled_G[:, None]
  adv_GxK, _ = core.hacpo_advantages(r_GxK, is_self_GxK, cap_GxK, scale_by_std=cfg.scale_by_std,
                                     mask_GxK=mask_GxK)
  adv_GxK = np.asarray(adv_GxK)
  src_mean = src_roll.old_mean_logp_B
  rows = Rows()
  split = selected_G is not None  # GRPO's loss outside the selected prompts
  for q in range(g):
    kind = KIND_HACPO if split and pooled_G[q] else KIND_PPO
    add_own_group(rows, recv_roll, q, adv_N=adv_GxK[q, :n] if kind == KIND_HACPO or not split
                  else None, kind=kind)
    for j in range(n):
      b = q * n + j
      finite = np.isfinite(src_mean[b]) and len(ids[b]) > 0
      rows.add(recv_roll.prompt_ids[q], ids[b], q, adv=adv_GxK[q, n + j], keep=finite,
               grafted=bool(pooled_G[q]), is_self=False, kind=kind,
               src_mean_logp=src_mean[b] if finite else 0.0, cap_ratio=cap_ratio, old_logp=old[b])
  # The KL's reference: the receiver's initial parameters.
  ref = nnx.merge(recv_policy.graphdef, recv_policy.ref_params)
  rows.ref_logp = score_rows(ref, rows.prompt_ids, rows.response_ids, recv_policy.pad_id,
                             temperature=cfg.rollout.temperature, length_cap=length_cap)
  stats = dataclasses.replace(pair_stats(recv_roll, src_roll), peer_offered=len(offered),
                              dropped_empty=empty, cap_ratio=cap_ratio)
  if selected_G is not None:
    stats.grafted_groups = int(pooled_G.sum())
  return rows, stats


class Hacpo(Method):
  name = "hacpo"
  keeps_reference = True
  pair_only = True
  resume_locked = ("hacpo", "graft")  # graft.*: hacpo.prompts='graft_selected'
  peer_scoring = "all"

  @classmethod
  def check(cls, cfg):
    super().check(cfg)
    h = cfg.hacpo
    if cfg.prompts_per_step % h.minibatch_prompts:
      raise ConfigError(f"hacpo.minibatch_prompts ({h.minibatch_prompts}) must divide "
                        f"prompts_per_step ({cfg.prompts_per_step})",
                        field="hacpo.minibatch_prompts")

  def __init__(self, cfg):
    super().__init__(cfg)
    self.capability: CapabilityTracker | None = None

  def start(self, names, reward_fn):
    h = self.cfg.hacpo
    self.capability = CapabilityTracker(self.trained(names), window=h.capability_window,
                                        ratio_clamp=tuple(h.ratio_clamp))

  def build_rows(self, policies, rolls, peers, key):
    # The rows read every rollout's old means (each row's source policy), so they are
    # scored first, by the policy that sampled them.
    for name, roll in rolls.items():
      score_rollout(policies[name], roll, self.cfg)
    if self.capability is None:
      self.start(list(rolls), None)
    self.capability.update({name: roll.successes_GxN for name, roll in rolls.items()})
    selected = (graft_selected(rolls, peers, self.cfg)
                if self.cfg.hacpo.prompts == "graft_selected" else {})
    return per_receiver(rolls, peers, lambda i, name, srcs: hacpo_rows(
        policies[name], rolls[name], only_peer(srcs),
        self.capability.ratio(only_peer(srcs).name, name), self.cfg, selected.get(name)))

  @property
  def loss_fn(self):
    h = self.cfg.hacpo
    loss = HacpoLoss(temperature=self.cfg.rollout.temperature, self_clip=tuple(h.self_clip),
                     cross_clip=h.cross_clip, cross_step=h.cross_clip_step, kl_coef=h.kl_coef)
    if h.prompts != "graft_selected":
      return loss
    return HacpoOnSelectedLoss(hacpo=loss, grpo=super().loss_fn)

  def order(self):
    """HACPO has no peer-last order: its minibatches are a random permutation of the
    groups. With every group pooled (``prompts='all'``) ``'peer_last'`` gives the same
    permutation; on GRAFT's prompts only, it would carry GRAFT's order over."""
    return "uniform"

  def num_minibatches(self, g):
    return max(1, g // min(self.cfg.hacpo.minibatch_prompts, g))

  def state_dict(self):
    return {"capability": self.capability.to_dict() if self.capability else None}

  def load_state_dict(self, state):
    if state.get("capability"):
      self.capability = CapabilityTracker.from_dict(state["capability"])
