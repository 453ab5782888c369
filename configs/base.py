"""The paper's run (arXiv 2609.37868) and its method and ablation presets.

Every field and its default is defined once, in the dataclasses of
graft_jax/config/run_config.py (the paper's hyperparameters); this file and the
other configs only change what differs. `get_config('grpo16')` picks a method
or ablation preset; presets combine with commas ('no_gate,peer_first').
Single fields: `--config.graft.delta=0.9`.
"""

import difflib

from graft_jax.config import load as config_load
from graft_jax.train import methods


def defaults():
  """The unlocked default ConfigDict (every field, the paper's values; every registered
  method's section)."""
  return methods.config_dict()


def _set(**updates):
  """A preset: dotted field -> value."""
  def apply(c):
    for field, value in updates.items():
      config_load.set_field(c, field, value)
  return apply


PRESETS = {
    'graft': _set(),
    'grpo': _set(method='grpo'),
    'grpo8': _set(method='grpo'),
    'grpo16': _set(method='grpo', n=16),
    'grpo32': _set(method='grpo', n=32),
    'hacpo': _set(method='hacpo'),
    'sgt': _set(method='sgt'),
    # The two baselines' updates on GRAFT's selected prompts only (methods/sgt.py, hacpo.py).
    'sgt_graft_prompts': _set(method='sgt', **{'sgt.prompts': 'graft_selected'}),
    'hacpo_graft_prompts': _set(method='hacpo', **{'hacpo.prompts': 'graft_selected'}),
    'replay': _set(method='replay'),
    'luffy': _set(method='luffy'),
    # GRAFT ablations (graft_jax.train.peer_rows and graft_jax.core docstrings).
    'pooled': _set(**{'graft.advantages': 'pooled'}),
    'success_only': _set(**{'graft.transfer': 'success_only'}),
    'no_gate': _set(**{'graft.gate': 'off'}),
    'sequence_ratio': _set(**{'graft.ratio_level': 'sequence'}),
    'peer_first': _set(**{'graft.order': 'peer_first'}),
    'uniform': _set(**{'graft.order': 'uniform'}),
    'no_balance': _set(**{'graft.balance': False}),
    'delta0': _set(**{'graft.delta': 0.0}),
    'delta0.9': _set(**{'graft.delta': 0.9}),
    'dr_grpo': _set(scale_by_std=False),
    # Rollouts from vLLM sidecars instead of the JAX sampler (docs/vllm.md).
    'vllm': _set(engine='vllm'),
}


def apply_presets(c, arg):
  """Applies comma-separated presets in order; returns their joined name."""
  names = [a.strip() for a in (arg or 'graft').split(',') if a.strip()]
  for name in names:
    if name not in PRESETS:
      close = difflib.get_close_matches(name, PRESETS, n=1)
      hint = f' (did you mean {close[0]!r}?)' if close else ''
      raise ValueError(f'unknown config preset {name!r}{hint}; '
                       f'known: {", ".join(PRESETS)}')
    PRESETS[name](c)
  return '_'.join(names) or 'graft'


def get_config(arg=None):
  c = defaults()
  apply_presets(c, arg)
  c.lock()
  return c


def set_models(c, models):
  """Makes ``models`` ((path, name) per model, any number >= 2) the run's models.

  The pair fields go back to their defaults: a config sets one or the other.
  Override from the command line with the whole list:
  `--config.models="[{'path': 'p0', 'name': 'm0'}, ...]"`.
  """
  blank = defaults()
  c.model_a, c.model_b = blank.model_a, blank.model_b
  c.models = tuple(dict(path=path, name=name) for path, name in models)


def pair_config(arg, *, pair, model_a, model_b):
  """A real pair with the paper's hyperparameters; (path, name) per model.

  Each model is a local folder or a Hub id (downloaded once, then reused
  offline; `model_a.revision` pins a commit); data files are local paths, as
  `launch/prepare_data.py` writes them. Edit them here or override with
  `--config.model_a.path=...`.
  """
  c = defaults()
  preset = apply_presets(c, arg)
  c.workdir = f'runs/{pair}/{preset}'
  for key, (path, name) in (('model_a', model_a), ('model_b', model_b)):
    c[key].path = path
    c[key].name = name
  c.data.train_path = 'data/math/train.jsonl'  # MATH train, 7,500 problems
  c.eval.data_dir = 'data/eval'
  # Validation twice an epoch (58 steps of MATH train) at k=4: the paper's cadence (every
  # 5 steps, k=8) costs more than the training steps in the plan (docs/evaluation.md).
  c.eval.update(dict(every_steps=29, k=4))
  # Memory: FSDP over every device, one 6,144-token row per device per gradient
  # micro-batch, each block rematerialised, blocks under a scan, attention by the
  # backend's flash kernel ('auto': cuDNN on GPUs), the JAX sampler's KV cache under
  # 32 GiB per call.
  # launch/plan.py prints what this takes per device (docs/configs.md).
  c.mesh.update(dict(data=1, fsdp=-1, tensor=1))
  c.perf.update(dict(micro_batch_tokens=6144, remat='full', scan_layers=True,
                     attention_impl='auto', sampler_max_kv_bytes=32 * 2**30))
  # The JAX engine's rollouts from the slot pool (graft_jax.rollout.continuous): a finished
  # row's slot takes the next waiting one, where the static sampler, the reference engine
  # (rollout.sampler='static'), decodes each call until its longest row stops.
  c.rollout.sampler = 'pool'
  # A prompt prefilled 256 tokens a pass: each pass reads every weight, so passes cost
  # more than the padding of a short prompt to 256 (launch/plan.py's pair 1 step by
  # chunk: BENCHMARKS.md, "The plan of the paper's pairs"). A device refills once 2 of
  # its slots are free: half the lone passes of a full pool for half a slot idle, the
  # plan's best of 1, 2, 4 and 8 for pair 1 (docs/plan.md).
  c.rollout.pool_prefill_chunk = 256
  c.rollout.pool_refill_at = 2
  c.checkpoint.async_save = True  # fp32 params and moments: write while the next step runs
  if c.engine == 'vllm':
    four_gpu_placement(c)
  c.lock()
  return c


def four_gpu_placement(c):
  """A pair on one 4-GPU node (4 x H200) with vLLM, from launch/plan.py's plans: the
  trainer on all four GPUs (FSDP over four, so the update, a step's largest phase, has
  every GPU), and four servers per model, one on each GPU with 0.25 of it
  (``vllm.data_parallel``): a step's prompts split over them, so sampling reads from
  all four GPUs' memory instead of one GPU per model (docs/clusters.md). The trainer's
  share is what the servers leave, 0.45, about 59 GiB: the plan's largest update of
  the pair plus the workspace margin needs 38 GiB. A server's bf16 weights (under 6
  GiB) leave it about 27 GiB of KV cache. Weights go to the servers on GPUs 1-3 by
  NCCL and to the ones on GPU 0, the sender's, by CUDA IPC ('auto')."""
  c.jax_devices = ()
  c.vllm.gpus.model_a = (0, 1, 2, 3)
  c.vllm.gpus.model_b = (0, 1, 2, 3)
  c.vllm.data_parallel = 4
  c.vllm.gpu_memory_utilization = 0.25
  c.vllm.weight_sync = 'auto'
