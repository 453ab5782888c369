"""Stored-log replay: GRAFT one way, from a peer's recorded rollouts instead of a live peer.

Only the first model trains; the second is its logs (``graft_jax.train.replay_source``),
and every candidate is taken (no balancing: there is no reverse direction).
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

from graft_jax import core
from graft_jax.config.checks import policy_fields
from graft_jax.config.errors import ConfigError, PathError
from graft_jax.outputs import peer_log
from graft_jax.train.methods.graft import Graft
from graft_jax.train.replay_source import ReplaySource


class Replay(Graft):
  name = "replay"
  pair_only = True
  resume_locked = ("graft", "replay")

  @classmethod
  def check(cls, cfg):
    super().check(cfg)
    if not cfg.replay.log_dir:
      raise ConfigError("method=replay needs replay.log_dir", field="replay.log_dir")

  @classmethod
  def paths(cls, cfg):
    """The peer is its logs: ``<replay.log_dir>/<peer name>`` must be there."""
    log_dir = cfg.replay.log_dir
    if not os.path.exists(log_dir):
      raise PathError("replay.log_dir", f"no such file or folder {log_dir!r}")
    field, peer = policy_fields(cfg)[1]
    logs = pathlib.Path(log_dir, peer.name)
    if not logs.is_dir():
      raise PathError("replay.log_dir", f"no peer logs of {field}.name {peer.name!r} "
                      f"(no folder {str(logs)!r})")

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
