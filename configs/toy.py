"""The embedded default: a tiny heterogeneous pair on synthetic math, CPU-sized.

The two tiny models are built (HF format) under runs/toy_pair/ by the toy
setup; here they are plain paths. Presets as in base.py, e.g. `toy.py:grpo`;
only what differs from the paper's defaults (graft_jax/config/run_config.py) is set.
"""

import pathlib

from graft_jax.config import run_config as config_lib

_base = config_lib.import_config_file(
    pathlib.Path(__file__).with_name('base.py'))

# Adam's first updates move every weight by about lr whatever the gradient;
# without a ramp, toy_b's training reward fell from 0.30 to 0.16 after step 1
# (RESULTS.md). The ramp spans the first 5 training steps, whatever the number
# of optimizer updates per step (a regime with more minibatches ramps as long).
WARMUP_TRAIN_STEPS = 5


def get_config(arg=None):
  c = _base.defaults()
  preset = _base.apply_presets(c, arg)
  c.workdir = f'runs/toy/{preset}'
  c.model_a.update(dict(path='runs/toy_pair/model_a', name='toy_a'))
  c.model_b.update(dict(path='runs/toy_pair/model_b', name='toy_b'))
  c.data.source = 'synthetic'
  c.data.prompt_suffix = ' Answer:'  # graft_jax.toy.PROMPT_SUFFIX, what the pair was warm-started on
  # The toy pair's column families (graft_jax.data.synthetic_columns). With
  # seed 0 and num <= 1024 these are exactly the start of the toy's RL pool
  # (graft_jax.toy.pools), which no warm start contains; the toy job passes
  # that pool itself, in a balanced order, so the stream is read unshuffled.
  c.data.synthetic.update(
      dict(families=('cadd', 'cmul'), difficulty=2, num=1024, seed=0))
  c.data.shuffle = False
  # Both families in every step (12 + 12): each model has all-fail groups on
  # its weak family that the peer can fill, so m is not capped by one side.
  c.prompts_per_step = 24
  c.num_minibatches = 2
  c.hacpo.minibatch_prompts = 12  # same 2 updates per step as the paper's 64/128
  c.total_steps = 80
  c.max_prompt_len = 16
  c.max_response_len = 48
  # Gradient micro-batches of 24 rows x 64 tokens, packed: the rows of all-fail and
  # all-pass groups (about two thirds of GRPO's) then run no forward or backward
  # pass (skip_silent_rows), and the smaller working set is faster on a CPU
  # (BENCHMARKS.md: toy main job).
  c.perf.micro_batch_tokens = 1536
  # Tiny models need a far larger step than 1e-6. At 2e-4, toy_b's GRPO did not
  # learn (training reward flat at 0.3, KL per update 10-100x toy_a's; its
  # held-out pass@1 29.0 -> 29.9 over three seeds) while at 1e-4 it rose to 38
  # in 40 steps; at 3e-4 and above Adam lowers the likelihood of everything at
  # this scale. At 1e-4 the weak family is learnt from grafted groups more
  # slowly, hence 80 steps (RESULTS.md).
  c.optimizer.lr = 1e-4
  c.optimizer.warmup_steps = WARMUP_TRAIN_STEPS * c.num_minibatches  # in updates: 10
  c.dtype = 'float32'  # bf16 matmuls are slow on CPU
  # With `:vllm`: CPU sidecars in fp32 like the trainer; eager mode starts fastest.
  c.vllm.update(dict(dtype='float32', enforce_eager=True))
  c.reward.update(dict(timeout_s=2.0, num_workers=1))
  c.eval.update(dict(k=1, temperature=1.0, top_p=1.0, suite=('synthetic',), max_examples=64))
  c.lock()
  return c
