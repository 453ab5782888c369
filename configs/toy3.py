"""Three toy models, GRAFT across K = 3: configs/toy.py with the toy trio as `models`.

The trio (graft_jax.toy.spec.trio_config: toy_a strong on column addition,
toy_b on multiplication, toy_c on subtraction) is built under runs/toy_trio/
by `launch/toy_job.py --models 3`, which also writes the RL pool there
(rl.jsonl: the three families in a balanced order, in no warm start and not
held out). Presets as in base.py, e.g. `toy3.py:grpo`; everything else is
configs/toy.py's, so the pair and the trio train under the same settings.
"""

import pathlib

from graft_jax.config import run_config as config_lib

_here = pathlib.Path(__file__).parent
_base = config_lib.import_config_file(_here / 'base.py')
_toy = config_lib.import_config_file(_here / 'toy.py')

TRIO = (('runs/toy_trio/model_a', 'toy_a'), ('runs/toy_trio/model_b', 'toy_b'),
        ('runs/toy_trio/model_c', 'toy_c'))


def get_config(arg=None):
  c = _toy.get_config(arg)
  with c.unlocked():
    c.workdir = c.workdir.replace('runs/toy/', 'runs/toy3/', 1)
    _base.set_models(c, TRIO)
    # csub is not a make_synthetic family: the trio's RL pool comes as a file,
    # already in a balanced order (8 + 8 + 8 prompts of the three families per
    # step of 24), so it is read unshuffled.
    c.data.source = 'file'
    c.data.train_path = 'runs/toy_trio/rl.jsonl'
    c.data.shuffle = False
  return c
