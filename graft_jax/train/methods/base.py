"""The ``Method`` interface: what a training method decides inside ``train_step``.

A method says which policies train, who each receiver's peers are, how the
receiver's update rows are built from (own rollouts, peer rollouts), its loss
(``loss_fn``: the function, the rows that can move it, the batch it reads), its
minibatch count and order, and any state it carries across steps (which goes
into the checkpoint). ``train_step`` is the same for every method:
collect -> build rows -> old log-probs -> updates.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from graft_jax import core
from graft_jax.config.checks import policy_configs
from graft_jax.config.errors import ConfigError
from graft_jax.outputs import metric_kinds as kinds
from graft_jax.train.peer_rows import ExchangeStats, own_rows
from graft_jax.train.update_rows import Rows

# Per receiver: its update rows, and what its exchange did (None: it had no peer).
BuiltRows = dict[str, tuple[Rows, ExchangeStats | None]]
# Per receiver: its peers' rollouts by peer name ({} for a policy without peers).
Peers = dict[str, dict]


@flax.struct.dataclass
class PpoBatch:
  """The rows of the clipped token loss: per token (B x T) and per row (B)."""

  ids: jax.Array
  attn: jax.Array
  resp_mask: jax.Array
  old_logp: jax.Array
  adv: jax.Array
  weight: jax.Array
  grafted: jax.Array
  ppo: jax.Array
  sgt: jax.Array


def whole_minibatch_mean(mean, count, total):
  """A micro-batch's mean over its ``count`` units, re-divided by the minibatch's
  ``total``: micro-batches' values then add up to the minibatch's mean."""
  return mean * jnp.maximum(count, 1.0) / jnp.maximum(total, 1.0)


def sequence_counts(attn_BxT) -> dict:
  """The micro-batch's row lengths L_b (prompt and response) as the sum and the sum of
  squares: what the update's forward and backward ran over (`graft_jax.outputs.step_cost`)."""
  len_B = attn_BxT.astype(jnp.float32).sum(axis=1)
  return kinds.metrics(kinds.SUM, seq_tokens=len_B.sum(), seq_tokens_sq_sum=(len_B * len_B).sum())


@dataclasses.dataclass(frozen=True)
class ClippedTokenLoss:
  """The clipped token loss (GRPO, GRAFT, replay), plus SGT's NLL term when ``sgt_coef``.

  Hashable and static: the update compiles once per distinct value.
  """

  Batch: ClassVar[type] = PpoBatch
  clip_low: float = 0.2
  clip_high: float = 0.28
  ratio_level: str = "token"
  sgt_coef: float = 0.0
  temperature: float = 1.0

  def __call__(self, logp_BxT, batch: PpoBatch, totals: dict, update_index):
    """(loss, metrics) of one micro-batch; every sum is divided by the whole minibatch's
    counts in ``totals``, so micro-batches add up. ``batch.old_logp`` is pi_old on
    every row (the update fills the rows whose pi_old is its own forward)."""
    del update_index
    mask_BxT, graft_B = batch.resp_mask, batch.grafted
    ppo_mask = mask_BxT * batch.ppo[:, None]
    loss, aux = core.clipped_token_loss(
        logp_BxT, batch.old_logp, batch.adv, batch.weight, ppo_mask, clip_low=self.clip_low,
        clip_high=self.clip_high, ratio_level=self.ratio_level, num_tokens=totals["num_tokens"])
    tokens_B = ppo_mask.sum(axis=1)
    clipped_B = aux["clip_low_count_B"] + aux["clip_high_count_B"]
    metrics = {
        **kinds.metrics(kinds.MEAN, pg_loss=loss),
        **kinds.metrics(kinds.FRACTION, **{k: aux[k] for k in (
            "approx_kl", "ratio_mean", "clip_frac_low", "clip_frac_high")}),
        # Pooled into the step's clip fractions of own and grafted tokens.
        **kinds.metrics(kinds.POOLED, own_tokens=(tokens_B * (1 - graft_B)).sum(),
                        graft_tokens=(tokens_B * graft_B).sum(),
                        own_clipped=(clipped_B * (1 - graft_B)).sum(),
                        graft_clipped=(clipped_B * graft_B).sum()),
        **sequence_counts(batch.attn),
    }
    if self.sgt_coef:
      nll, count = core.sgt_nll(logp_BxT, mask_BxT, batch.sgt, coef=self.sgt_coef)
      nll = whole_minibatch_mean(nll, count, totals["num_sgt_tokens"])
      metrics.update(kinds.metrics(kinds.MEAN, sgt_loss=nll))
      metrics.update(kinds.metrics(kinds.POOLED, sgt_tokens=count))
      loss = loss + nll
    return loss, metrics

  def has_signal(self, batch: PpoBatch) -> np.ndarray:
    """Rows whose loss term can be non-zero. Under the clipped token loss (no KL, no
    entropy term) a PPO row contributes
    :math:`w_j \\min(\\rho_{j,t} A_j, \\operatorname{clip}(\\rho_{j,t}) A_j)`, which is 0
    with its gradient when :math:`w_j A_j = 0`: the rows of all-fail and all-pass
    groups, and grafted rows the gate weighted to 0. A row in SGT's NLL term is never
    silent."""
    signal_B = (np.asarray(batch.ppo) > 0) & (np.asarray(batch.adv) * np.asarray(batch.weight) != 0)
    if self.sgt_coef:
      signal_B |= np.asarray(batch.sgt) > 0
    return signal_B

  def totals(self, batch: PpoBatch) -> dict:
    """The whole minibatch's denominators, counted on the host (exact integers)."""
    mask_BxT = np.asarray(batch.resp_mask, np.float32)
    return {"num_tokens": np.float32((mask_BxT * np.asarray(batch.ppo)[:, None]).sum()),
            "num_sgt_tokens": np.float32((mask_BxT * np.asarray(batch.sgt)[:, None]).sum())}

  def units(self, batch: PpoBatch) -> np.ndarray:
    """Per row, the units its loss averages over (PPO tokens): a micro-batch's fraction
    metrics weigh by its share of them."""
    return (np.asarray(batch.resp_mask, np.float32) * np.asarray(batch.ppo)[:, None]).sum(axis=1)


class Method:
  """Defaults: every policy trains against every other one of the run's models (none
  alone), with the clipped token loss, ``cfg.num_minibatches`` minibatches, grafted
  groups last, and no state. A method overrides what differs; ``build_rows`` it must
  define. A method's own settings are its config section: ``check`` and ``paths`` check
  them, ``resume_locked`` names them.

  Args:
    cfg: a validated ``TrainConfig``.
  """

  name: ClassVar[str]
  # Keep each policy's initial parameters (HACPO's KL reference).
  keeps_reference: ClassVar[bool] = False
  # Defined for exactly two models (one peer per receiver).
  pair_only: ClassVar[bool] = False
  # Its choices count successes (k of n per prompt): rewards must be 0/1, or
  # reward.success_threshold says which count (`collect.check_successes`).
  counts_successes: ClassVar[bool] = True
  # Its own settings, a frozen dataclass of defaults: registered, it is the config section
  # cfg.<name> (`methods.register`), overridable as --config.<name>.<field>.
  Settings: ClassVar[type | None] = None
  # The config sections (dotted prefixes) of this method's settings: a resumed run may not
  # change them (`config.checks.check_resume`), as it may not change the shared ones.
  resume_locked: ClassVar[tuple[str, ...]] = ()
  # Which peer rows a receiver scores (a forward pass) before its update, for the planner:
  # "picked" (the grafted ones), "all" (every peer row) or None.
  peer_scoring: ClassVar[str | None] = None

  def __init__(self, cfg):
    self.cfg = cfg

  @classmethod
  def check(cls, cfg) -> None:
    """Raises `ConfigError` naming the field on a setting this method cannot run with;
    runs right after the config's own checks, before anything loads."""
    k = len(policy_configs(cfg))
    if k > 2 and cls.pair_only:
      raise ConfigError(f"models has {k} entries but method={cls.name} is defined for a pair "
                        f"of models; list 2 models or use method=graft or grpo", field="models")

  @classmethod
  def paths(cls, cfg) -> None:
    """Launch-time check of the files and folders this method reads beyond the run's own
    (`config.checks.check_paths`); raises `PathError` naming the field."""

  def start(self, names: list[str], reward_fn) -> None:
    """Sets up what a whole run needs (all model names, trained or not; the reward)."""

  def trained(self, names: list[str]) -> list[str]:
    """The policies that sample and update, of the run's models (in order)."""
    return list(names)

  def peers(self, rolls: dict, problems, epoch: int) -> Peers:
    """Each receiver's peers' rollouts by name: every other model; none for one model."""
    if len(rolls) < 2:
      return {}
    return {r: {p: roll for p, roll in rolls.items() if p != r} for r in rolls}

  def build_rows(self, policies: dict, rolls: dict, peers: Peers, key) -> BuiltRows:
    """Every trained policy's rows (and its ``ExchangeStats`` where it has a peer)."""
    raise NotImplementedError

  def step_metrics(self, built: BuiltRows) -> dict:
    """Step-level metrics beyond the per-receiver ones."""
    return {}

  @property
  def loss_fn(self):
    """The loss (a hashable callable: ``loss_fn(logp_BxT, batch, totals, update_index)``
    -> (loss, ``{name: metric_kinds.Metric}``), each metric with its reducer) with its
    ``Batch`` type, ``has_signal``, ``totals`` and ``units``."""
    cfg = self.cfg
    return ClippedTokenLoss(clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                            temperature=cfg.rollout.temperature)

  def has_signal(self, batch) -> np.ndarray:
    """Rows of a host batch whose loss term can be non-zero; the others need neither a
    forward pass nor old log-probs."""
    return self.loss_fn.has_signal(batch)

  def num_minibatches(self, g: int) -> int:
    return self.cfg.num_minibatches

  def order(self) -> str:
    """``graft_jax.core.order_minibatches``'s order of the grafted groups."""
    return "peer_last"

  def state_dict(self) -> dict:
    """JSON-able state carried across steps (checkpoint metadata)."""
    return {}

  def load_state_dict(self, state: dict) -> None:
    """Restores ``state_dict``'s output."""


def per_receiver(rolls: dict, peers: Peers, build) -> BuiltRows:
  """``build(i, name, peers_of_name)`` for the i-th receiver with peers; own rows and no
  stats for a policy without any."""
  order = list(peers)
  return {name: build(order.index(name), name, peers[name]) if peers.get(name)
          else (own_rows(roll), None) for name, roll in rolls.items()}


def only_peer(peers_of_receiver: dict):
  """The one peer rollout of a pair-only method's receiver."""
  (src,) = peers_of_receiver.values()
  return src
