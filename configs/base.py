"""Every config field with the paper's defaults (arXiv 2609.37868), plus presets.

`get_config('grpo16')` picks a method or ablation preset; presets combine with
commas ('no_gate,peer_first'). Single fields: `--config.graft.delta=0.9`.
"""

import difflib

import ml_collections


def _model(name):
  return ml_collections.ConfigDict(dict(path='', name=name, template='plain'))


def defaults():
  """The unlocked default ConfigDict (the paper's hyperparameters)."""
  c = ml_collections.ConfigDict()
  c.method = 'graft'  # graft | grpo | hacpo | sgt | replay
  c.seed = 0
  c.workdir = 'runs/default'
  c.model_a = _model('model_a')
  c.model_b = _model('model_b')
  c.data = ml_collections.ConfigDict(dict(
      train_path='',
      format='jsonl',  # jsonl | parquet | synthetic
      prompt_suffix=(" Let's think step by step and output the final answer"
                     " within \\boxed{}."),
      shuffle=True,
      synthetic=dict(families=('add', 'mul'), difficulty=1, num=2048, seed=0),
      skip_malformed=False,  # True: skip and count malformed rows (logged, in metrics)
      too_long='skip',  # prompts over max_prompt_len: skip (counted) | error
  ))
  c.prompts_per_step = 128
  c.n = 8
  c.num_minibatches = 4
  c.ppo_epochs = 1
  c.total_steps = 0  # 0: epochs * (num_prompts // prompts_per_step) = 174
  c.epochs = 3
  c.max_prompt_len = 2048
  c.max_response_len = 4096
  c.rollout = ml_collections.ConfigDict(
      dict(temperature=1.0, top_p=1.0, top_k=0))
  c.optimizer = ml_collections.ConfigDict(dict(
      name='adamw', lr=1e-6, schedule='constant', warmup_steps=0, b1=0.9,
      b2=0.999, eps=1e-8, weight_decay=0.01, grad_clip=1.0))
  c.dtype = 'bfloat16'
  c.param_dtype = 'float32'
  c.clip_low = 0.2
  c.clip_high = 0.28
  c.scale_by_std = True
  c.old_logp_source = 'teacher_forced'  # teacher_forced | sampler
  c.graft = ml_collections.ConfigDict(dict(
      delta=0.8,
      balance=True,
      order='peer_last',  # peer_last | peer_first | uniform
      advantages='source',  # source | pooled
      transfer='full',  # full | success_only
      gate='on',  # on | off
      ratio_level='token',  # token | sequence
  ))
  c.hacpo = ml_collections.ConfigDict(dict(
      capability_window=5, ratio_clamp=(0.1, 10.0), self_clip=(3e-4, 4e-4),
      cross_clip=0.2, cross_clip_step=0.025, kl_coef=1e-3,
      minibatch_prompts=64))
  c.sgt = ml_collections.ConfigDict(dict(coef=0.1))
  c.replay = ml_collections.ConfigDict(dict(log_dir='', balance=False))
  c.reward = ml_collections.ConfigDict(dict(timeout_s=5.0, num_workers=2))
  c.eval = ml_collections.ConfigDict(dict(
      every_steps=5, temperature=0.6, top_p=0.95, k=8,
      suite=('math500', 'aime24', 'aime25', 'amc23', 'minerva'),
      data_dir='', max_examples=0))
  c.checkpoint = ml_collections.ConfigDict(
      dict(every_steps=10, keep=3, dir='', resume=True))
  c.logging = ml_collections.ConfigDict(dict(
      every_steps=1, tensorboard=True, progress_bar=True, peer_log=True,
      peer_log_dir=''))
  c.engine = 'jax'  # jax | vllm
  c.vllm = ml_collections.ConfigDict(dict(
      python='.venv-vllm/bin/python', gpu_memory_utilization=0.4,
      tensor_parallel_size=1, dtype='bfloat16', max_model_len=0,
      enforce_eager=False, enable_prefix_caching=True, startup_timeout_s=600.0,
      check_every=10, probe_tolerance=0.0, max_restarts=2, request_timeout_s=3600.0,
      health_every_s=10.0, max_concurrency=64))
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  c.micro_batch_tokens = 0  # per device; 0 = whole minibatch (launch/plan.py sizes it)
  c.remat = 'none'  # none | full | dots_saveable | dots_no_batch
  c.scan_layers = False
  return c


def _set(**updates):
  """A preset: dotted field -> value."""
  def apply(c):
    for field, value in updates.items():
      *parents, leaf = field.split('.')
      node = c
      for p in parents:
        node = node[p]
      node[leaf] = value
  return apply


PRESETS = {
    'graft': _set(),
    'grpo': _set(method='grpo'),
    'grpo8': _set(method='grpo'),
    'grpo16': _set(method='grpo', n=16),
    'grpo32': _set(method='grpo', n=32),
    'hacpo': _set(method='hacpo'),
    'sgt': _set(method='sgt'),
    'replay': _set(method='replay'),
    # GRAFT ablations (graft_jax.train.exchange and graft_jax.core docstrings).
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
    # Rollouts from vLLM sidecars instead of the JAX sampler (README: vLLM).
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


def pair_config(arg, *, pair, model_a, model_b):
  """A real pair with the paper's hyperparameters; (path, name) per model.

  Model folders and data files are local paths (nothing is downloaded); edit
  them here or override with `--config.model_a.path=...`.
  """
  c = defaults()
  preset = apply_presets(c, arg)
  c.workdir = f'runs/{pair}/{preset}'
  for key, (path, name) in (('model_a', model_a), ('model_b', model_b)):
    c[key].path = path
    c[key].name = name
  c.data.train_path = 'data/math/train.jsonl'  # MATH train, 7,500 problems
  c.eval.data_dir = 'data/eval'
  # Memory: FSDP over every device, one 6,144-token row per device per gradient
  # micro-batch, each block rematerialised, blocks under a scan. launch/plan.py
  # prints what this takes per device (README: real pairs).
  c.mesh.update(dict(data=1, fsdp=-1, tensor=1))
  c.micro_batch_tokens = 6144
  c.remat = 'full'
  c.scan_layers = True
  c.lock()
  return c
