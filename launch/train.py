"""Train GRAFT or a baseline.

  .venv/bin/python launch/train.py --config=configs/toy.py:graft [--workdir=DIR] [--steps=N]
      [--config.optimizer.lr=3e-4 ...] [--verbose]

Everything the run needs (config values, workdir, model folders, data and
benchmark files) is checked before a model loads; a mistake is one line
naming the field. A model named by Hub id (`--config.model_a.path=org/name`,
optionally `--config.model_a.revision=...`) is downloaded once into the Hugging
Face cache and reused offline; config.json records the commit it trained. The run ends by writing each trained model as a Hugging
Face folder (<workdir>/hf/<model>, `checkpoint.export_hf`) and prints each
model's validation pass@1 and the paths it wrote.

One trainer per workdir: a second one stops in one line naming the holder of
<workdir>/trainer.lock, before any model loads. SIGTERM, SIGINT or SIGUSR1 stops
the run after the step in flight with a checkpoint and exit code 75; the same
command resumes. A second signal ends it at once.
"""

import pathlib
import time

from absl import flags

from graft_jax import cli, distributed
from graft_jax.config import run_config as config_lib
from graft_jax import preemption
from graft_jax.outputs import progress
from graft_jax.outputs import workdir_lock, workdir_runs

_WORKDIR = flags.DEFINE_string("workdir", None, "where the run writes everything (default: config)")
_STEPS = flags.DEFINE_integer("steps", None, "stop after this many steps (default: config)",
                              lower_bound=1)


def main(config_dict):
  if _WORKDIR.value:
    config_dict.workdir = _WORKDIR.value
  from graft_jax.train import methods
  cfg = methods.from_config_dict(config_dict)  # the method's name first, then every field
  from graft_jax.models import hub
  cfg = hub.resolve_models(cfg)  # Hub ids: their cached folders and commits, before any check
  # The models: after the config is known to be good.
  from graft_jax.toy import pair as toy_pair
  from graft_jax.train import setup
  methods.check_paths(cfg, pending=toy_pair.default_folders())
  setup.start_processes(cfg)  # joins a multi-process run's other processes (README: Multi-host)
  # After start-up, whose SIGTERM handler (jax.distributed's) this replaces; a signal while
  # the models load stops the run before its first step.
  with preemption.StopSignals() as stop, workdir_lock.held(cfg.workdir):
    train(cfg, stop)  # a second trainer on this workdir stopped just above


def train(cfg, stop):
  from graft_jax.toy import pair as toy_pair
  from graft_jax.train import methods, setup
  if distributed.is_writer():  # process 0 writes the run's files
    workdir_runs.claim(cfg)  # resume=False: not over another run's files
    methods.write_run_config(cfg)  # a resume that changes the math stops here
  start = time.perf_counter()
  # A config naming the toy pair's folders (configs/toy.py) builds the pair on first use.
  trainer = setup.build_trainer(cfg, build_models=lambda c: toy_pair.ensure_if_named(
      m.path for m in config_lib.policy_configs(c)))
  try:
    trainer.run(_STEPS.value, stop)
    if cfg.checkpoint.export_hf:
      progress.phase("writing each trained model as a Hugging Face folder…")
      trainer.export_hf(pathlib.Path(cfg.workdir, "hf"), dtype=cfg.checkpoint.export_dtype)
  finally:
    trainer.close()
  if distributed.is_writer():
    print(progress.summary(workdir=cfg.workdir, steps=trainer.step, method=cfg.method,
                           seconds=time.perf_counter() - start,
                           history=trainer.validator.history if trainer.validator else {},
                           outputs=progress.run_outputs(cfg)))


if __name__ == "__main__":
  cli.run(main, default_config="configs/toy.py")
