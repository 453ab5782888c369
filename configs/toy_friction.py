"""The toy's second regime: the friction pair under the embedded default's settings.

The pair (`graft_jax.toy.friction`, built under runs/toy_friction) has memorized
shortcuts: bare correct answers on part of each model's strong-family RL pool,
correct but harmful for the peer to imitate. Everything else is configs/toy.py,
presets included (`toy_friction.py:graft,no_gate`), but for the number of
minibatches: four per step, the paper's count, so that the policy has moved and
clipping is active when the grafted groups (last) arrive; with two, the clip
fraction on grafted tokens was about 0.1% (RESULTS.md). HACPO's minibatch size
and the learning-rate warm-up (counted in updates) follow from it, so that each
method makes as many updates per step as the others and the warm-up ends at
the same step as in configs/toy.py. `launch/toy_job.py
--regime friction` and `launch/toy_benchmark.py --regime friction` use this file.
"""

import pathlib

from graft_jax.config import run_config as config_lib

_toy = config_lib.import_config_file(pathlib.Path(__file__).with_name('toy.py'))


def get_config(arg=None):
  c = _toy.get_config(arg)
  with c.unlocked():
    c.workdir = c.workdir.replace('runs/toy/', 'runs/toy_friction_runs/', 1)
    c.model_a.path = 'runs/toy_friction/model_a'
    c.model_b.path = 'runs/toy_friction/model_b'
    c.num_minibatches = 4
    c.hacpo.minibatch_prompts = 6  # HACPO's updates per step match (24 prompts / 6)
    # Twice the updates per step: the same warm-up in updates would end after 2.5
    # steps, not 5 as in configs/toy.py.
    c.optimizer.warmup_steps = _toy.WARMUP_TRAIN_STEPS * c.num_minibatches
  return c
