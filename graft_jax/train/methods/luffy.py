"""GRAFT with LUFFY-style policy shaping on grafted tokens (arXiv 2504.14945).

The rows are GRAFT's; only the loss differs. On a grafted row the clipped ratio
gives way to the shaped probability of each token, with no clip:

.. math::
    L = -\\frac{1}{N} \\Bigl(\\sum_{j \\in \\text{own}} w_j \\sum_t
        \\min(\\rho_{j,t} A_j, \\operatorname{clip}(\\rho_{j,t}) A_j)
        + \\sum_{j \\in \\text{grafted}} w_j A_j \\sum_t
        \\frac{\\pi_\\theta(o_{j,t})}{\\pi_\\theta(o_{j,t}) + \\gamma}\\Bigr),

N the minibatch's PPO tokens. The gradient of a grafted token,
:math:`\\gamma \\pi / (\\pi + \\gamma)^2 \\, \\nabla \\log \\pi`, is largest for
tokens the receiver finds unlikely, which clipping would mute.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from graft_jax.config.errors import ConfigError
from graft_jax.outputs import metric_kinds as kinds
from graft_jax.train.methods.base import ClippedTokenLoss
from graft_jax.train.methods.graft import Graft


@dataclasses.dataclass(frozen=True)
class ShapedTokenLoss(ClippedTokenLoss):
  """The clipped token loss on own rows, pi / (pi + gamma) on grafted ones."""

  gamma: float = 0.1

  def __call__(self, logp_BxT, batch, totals, update_index):
    own_B, graft_B = batch.ppo * (1 - batch.grafted), batch.ppo * batch.grafted
    loss, metrics = super().__call__(logp_BxT, batch.replace(ppo=own_B), totals, update_index)
    prob_BxT = jnp.exp(logp_BxT)
    shaped_BxT = prob_BxT / (prob_BxT + self.gamma) * batch.resp_mask * graft_B[:, None]
    shaped = -(shaped_BxT.sum(axis=1) * batch.weight * batch.adv).sum() / totals["num_tokens"]
    return loss + shaped, dict(metrics, **kinds.metrics(kinds.MEAN, pg_loss=loss + shaped,
                                                         shaped_loss=shaped))


@dataclasses.dataclass(frozen=True)
class LuffySettings:
  """``cfg.luffy``: the method's own section of the config."""
  gamma: float = 0.1  # pi / (pi + gamma) replaces the clipped ratio


class Luffy(Graft):
  name = "luffy"
  Settings = LuffySettings
  resume_locked = ("graft", "luffy")

  @classmethod
  def check(cls, cfg) -> None:
    super().check(cfg)
    if not cfg.luffy.gamma > 0:
      raise ConfigError(f"luffy.gamma must be > 0, got {cfg.luffy.gamma}", field="luffy.gamma")

  @property
  def loss_fn(self):
    return ShapedTokenLoss(**dataclasses.asdict(super().loss_fn), gamma=self.cfg.luffy.gamma)
