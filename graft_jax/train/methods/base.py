"""The ``Method`` interface: what a training method decides inside ``train_step``.

A method says which policies train, who each receiver's peers are, how the
receiver's update rows are built from (own rollouts, peer rollouts), its loss
spec, its minibatch count and order, and any state it carries across steps
(which goes into the checkpoint). ``train_step`` is the same for every method:
collect -> score -> ``build_rows`` -> updates.
"""

from __future__ import annotations

from typing import ClassVar

from graft_jax.train.peer_rows import ExchangeStats, own_rows
from graft_jax.train.update_rows import Rows
from graft_jax.train.update import HacpoLoss, PpoLoss

# Per receiver: its update rows, and what its exchange did (None: it had no peer).
BuiltRows = dict[str, tuple[Rows, ExchangeStats | None]]
# Per receiver: its peers' rollouts by peer name ({} for a policy without peers).
Peers = dict[str, dict]


class Method:
  """Defaults: every policy trains against every other one of the run's models (none
  alone), with the clipped token loss, ``cfg.num_minibatches`` minibatches, grafted
  groups last, and no state. A method overrides what differs; ``build_rows`` it must
  define. A method defined for a pair only sets ``pair_only`` (the config refuses it
  with more than two models).

  Args:
    cfg: a validated ``TrainConfig``.
  """

  name: ClassVar[str]
  # Keep each policy's initial parameters (HACPO's KL reference).
  keeps_reference: ClassVar[bool] = False
  # May the update's own forward pass stand in for the old-log-prob pass?
  old_logp_from_update: ClassVar[bool] = True
  # Defined for exactly two models (one peer per receiver).
  pair_only: ClassVar[bool] = False

  def __init__(self, cfg):
    self.cfg = cfg

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

  def loss(self, g: int) -> PpoLoss | HacpoLoss:
    """The static loss spec of a step of ``g`` prompts."""
    cfg = self.cfg
    return PpoLoss(clip_low=cfg.clip_low, clip_high=cfg.clip_high, ratio_level="token",
                   temperature=cfg.rollout.temperature,
                   old_from_current=self.old_logp_in_update(g))

  def old_logp_in_update(self, g: int) -> bool:
    """Whether the update's own forward pass stands in for the old-log-prob pass.

    With one minibatch and one PPO epoch the parameters being differentiated
    are the behavior policy's, so pi_old(o_t) is the stop-gradient of the same
    forward (as TRL and verl do with one update per batch of rollouts): no
    separate teacher-forced pass over the own rows. Grafted rows are still
    scored before the update, for the gate. ``old_logp_source='sampler'``
    asks for the sampler's log-probs instead.
    """
    cfg = self.cfg
    return (cfg.old_logp_source == "teacher_forced" and self.old_logp_from_update
            and cfg.ppo_epochs == 1 and self.num_minibatches(g) == 1)

  def old_logp_deferred(self, g: int) -> bool:
    """Whether the old-log-prob pass waits until the rows are built, and then scores
    only the own rows with a loss term (`graft_jax.train.deferred_old_logp`).

    With several updates per batch of rollouts the own rows need the behavior
    policy's log-probs, but a row without a loss term (an all-fail or all-pass
    group's, under GRPO most of them) is never run when the update packs its
    micro-batches and skips such rows (``skip_silent_rows``, ``pack_by_length``,
    ``micro_batch_tokens``), so its log-probs are never read. Which rows those are is the method's to say, once
    its rows are built. A method whose rows read the rollouts' old log-probs
    while they are built (``old_logp_from_update`` False: HACPO) scores them all
    up front.
    """
    cfg = self.cfg
    return (cfg.old_logp_source == "teacher_forced" and self.old_logp_from_update
            and cfg.skip_silent_rows and cfg.pack_by_length and cfg.micro_batch_tokens > 0
            and not self.old_logp_in_update(g))

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
