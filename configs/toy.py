"""The embedded default: a tiny heterogeneous pair on synthetic math, CPU-sized.

The two tiny models are built (HF format) under runs/toy_pair/ by the toy
setup; here they are plain paths. Presets as in base.py, e.g. `toy.py:grpo`.
"""

import pathlib

from graft_jax.train import config as config_lib

_base = config_lib.import_config_file(
    pathlib.Path(__file__).with_name('base.py'))


def get_config(arg=None):
  c = _base.defaults()
  preset = _base.apply_presets(c, arg)
  c.workdir = f'runs/toy/{preset}'
  c.model_a.update(dict(path='runs/toy_pair/model_a', name='toy_a'))
  c.model_b.update(dict(path='runs/toy_pair/model_b', name='toy_b'))
  c.data.format = 'synthetic'
  c.data.prompt_suffix = ' Answer:'  # graft_jax.toy.PROMPT_SUFFIX, what the pair was warm-started on
  c.data.synthetic.update(
      dict(families=('add', 'sub', 'mul'), difficulty=2, num=512, seed=0))
  c.prompts_per_step = 16
  c.num_minibatches = 2
  c.hacpo.minibatch_prompts = 8  # same 2 updates per step as the paper's 64/128
  c.total_steps = 24
  c.max_prompt_len = 32
  c.max_response_len = 48
  # Tiny randomly initialised models need a far larger step than 1e-6.
  c.optimizer.lr = 1e-4
  c.dtype = 'float32'  # bf16 matmuls are slow on CPU
  # With `:vllm`: CPU sidecars in fp32 like the trainer; eager mode starts fastest.
  c.vllm.update(dict(dtype='float32', enforce_eager=True))
  c.reward.update(dict(timeout_s=2.0, num_workers=1))
  c.eval.update(dict(every_steps=5, k=4, suite=('synthetic',),
                     max_examples=64))
  c.checkpoint.every_steps = 10
  c.lock()
  return c
