"""The gate on the friction pair: how it scores the peer's bare answers against its traces.

  python -m benchmarks.toy.friction_gate [--prompts 24] [--seed 11]

One exchange (`exchange_view`) of the built friction pair, before any training,
on memorized RL prompts of both models (`prompts` of each, interleaved). For each
receiver it prints the peer's correct responses split into bare answers
(`friction.is_shortcut`) and worked traces, with their median gate score s and
the share admitted, and how many of the peer's samples are bare answers and how
many of those are correct. This is what the regime rests on: correct bare
answers should score far below the gate, correct traces above it.
"""

from __future__ import annotations

import argparse
import logging
import tempfile

import numpy as np

from graft_jax import toy
from graft_jax.config import run_config as config_lib
from graft_jax.experiments import exchange_view, toy_compare
from graft_jax.toy import friction
from graft_jax.toy import pair as pair_lib
from graft_jax.train.trainer import Trainer


def gate_lines(rows, delta: float) -> list[str]:
  """Per receiver: the peer's correct bare answers and traces, their median s and share admitted."""
  out = []
  for recv in dict.fromkeys(r.receiver for r in rows):
    mine = [r for r in rows if r.receiver == recv]
    for kind, bare in (("bare answers", True), ("worked traces", False)):
      rs = [r for r in mine if r.reward > 0 and friction.is_shortcut(r.text) == bare]
      if rs:
        out.append(f"receiver {recv}, the peer's correct {kind}: {len(rs)}, median s "
                   f"{np.median([r.s for r in rs]):.3f}, admitted (s > {delta}) "
                   f"{np.mean([r.admitted for r in rs]):.0%}")
      else:
        out.append(f"receiver {recv}, the peer's correct {kind}: none")
    bare = [r for r in mine if friction.is_shortcut(r.text)]
    out.append(f"  the peer's samples: {len(mine)}, bare answers {len(bare) / len(mine):.1%}, "
               f"of which correct {np.mean([r.reward for r in bare] or [np.nan]):.1%}")
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--prompts", type=int, default=24, help="memorized prompts of each model")
  ap.add_argument("--seed", type=int, default=11, help="sampling seed")
  args = ap.parse_args()
  logging.basicConfig(level=logging.WARNING)
  pair_cfg = toy.friction_config()
  pair = toy.ensure_toy_pair(toy.FRICTION_ROOT, pair_cfg)
  pools = pair_lib.make_pools(pair_cfg)
  memorized = [friction.memorized(pair_cfg, pools, i)[:args.prompts] for i in (0, 1)]
  problems = [p for both in zip(*memorized) for p in both]
  cd = config_lib.load_config("configs/toy_friction.py:graft")
  with tempfile.TemporaryDirectory() as tmp, cd.unlocked():
    cd.workdir = tmp
    cd.logging.tensorboard = cd.logging.progress_bar = False
    cfg = config_lib.from_config_dict(cd)
    trainer = Trainer(cfg, problems, toy_compare.load_pair(pair))
    try:
      rows = exchange_view.exchange_view(cfg, trainer.policies, problems, trainer.reward_fn,
                                         seed=args.seed)
    finally:
      trainer.close()
  print("\n".join(gate_lines(rows, cfg.graft.delta)))


if __name__ == "__main__":
  main()
