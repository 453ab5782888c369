"""Train GRAFT or a baseline: ``python launch/train.py --config=configs/toy.py:graft --workdir=DIR``."""

from absl import app, flags
from ml_collections import config_flags

from graft_jax.train import config as config_lib
from graft_jax.train.setup import build_trainer

_CONFIG = config_flags.DEFINE_config_file("config", "configs/toy.py", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "where the run writes everything (default: config)")
_STEPS = flags.DEFINE_integer("steps", None, "stop after this many steps (default: config)")


def main(argv):
  del argv
  cd = _CONFIG.value
  if _WORKDIR.value:
    with cd.unlocked():
      cd.workdir = _WORKDIR.value
  cfg = config_lib.from_config_dict(cd)  # validated before anything loads
  trainer = build_trainer(cfg)
  try:
    trainer.run(_STEPS.value)
  finally:
    trainer.close()


if __name__ == "__main__":
  app.run(main)
