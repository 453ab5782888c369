"""Qwen3-1.7B-Base / OctoThinker-3B-Hybrid with the paper's hyperparameters."""

import pathlib

from graft_jax.config import run_config as config_lib

_base = config_lib.import_config_file(
    pathlib.Path(__file__).with_name('base.py'))


def get_config(arg=None):
  return _base.pair_config(
      arg, pair='qwen3_octothinker',
      model_a=('models/Qwen3-1.7B-Base', 'qwen3_1p7b'),
      model_b=('models/OctoThinker-3B-Hybrid-Base', 'octothinker_3b'))
