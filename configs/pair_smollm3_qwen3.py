"""SmolLM3-3B-Base / Qwen3-1.7B-Base with the paper's hyperparameters."""

import pathlib

from graft_jax.config import run_config as config_lib

_base = config_lib.import_config_file(
    pathlib.Path(__file__).with_name('base.py'))


def get_config(arg=None):
  return _base.pair_config(
      arg, pair='smollm3_qwen3',
      model_a=('models/SmolLM3-3B-Base', 'smollm3_3b'),
      model_b=('models/Qwen3-1.7B-Base', 'qwen3_1p7b'))
