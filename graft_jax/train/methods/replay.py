"""Stored-log replay: GRAFT one way, from a peer's recorded rollouts instead of a live peer.

Only the first model trains; the second is its logs (``graft_jax.train.replay_source``),
and every candidate is taken (no balancing: there is no reverse direction).
"""

from __future__ import annotations

import numpy as np

from graft_jax import core
from graft_jax.outputs import peer_log
from graft_jax.train.methods.graft import Graft
from graft_jax.train.replay_source import ReplaySource


class Replay(Graft):
  name = "replay"
  pair_only = True

  def __init__(self, cfg):
    super().__init__(cfg)
    self.source: ReplaySource | None = None
    self.missing = 0  # restored before the source exists

  def start(self, names, reward_fn):
    reader = peer_log.PeerLogReader(self.cfg.replay.log_dir, names[1])
    self.source = ReplaySource(reader, reward_fn, self.cfg, name=names[1])
    self.source.missing = self.missing

  def trained(self, names):
    return list(names[:1])

  def peers(self, rolls, problems, epoch):
    if self.source is None:
      raise RuntimeError("replay: start() (the run's model names and reward) must come "
                         "before the first step")
    return {next(iter(rolls)): {self.source.name: self.source(problems, epoch)}}

  def receives(self, rolls, peers):
    (name, srcs), = peers.items()
    (src_name, src), = srcs.items()
    recv_G, _ = core.select_exchange(rolls[name].k_G, src.k_G, self.cfg.n, balance=False)
    return {name: [src_name if r else None for r in np.asarray(recv_G)]}

  def step_metrics(self, built):
    return {"replay_missing": self.source.missing}

  def state_dict(self):
    return {"missing": self.source.missing if self.source else self.missing}

  def load_state_dict(self, state):
    self.missing = int(state.get("missing", 0))
    if self.source is not None:
      self.source.missing = self.missing
