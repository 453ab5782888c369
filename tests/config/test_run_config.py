"""Config files load and validate; every impossible value names its field."""

import pathlib
import re

import pytest

from graft_jax.config import run_config as config_lib

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / 'configs'
BASE = config_lib.import_config_file(CONFIGS / 'base.py')


def _with(**dotted):
  """The base config as a plain dict with dotted fields replaced."""
  d = BASE.get_config().to_dict()
  for field, value in dotted.items():
    *parents, leaf = field.split('__')
    node = d
    for p in parents:
      node = node[p]
    node[leaf] = value
  return d


# benchmarks.py configures launch/eval.py, not a training run.
TRAIN_CONFIGS = sorted(p for p in CONFIGS.glob('*.py') if p.name != 'benchmarks.py')


@pytest.mark.parametrize('path', TRAIN_CONFIGS, ids=str)
def test_every_config_file_loads_and_validates(path):
  cd = config_lib.load_config(str(path))
  assert cd.is_locked
  cfg = config_lib.from_config_dict(cd)
  assert isinstance(cfg, config_lib.TrainConfig)


def test_base_is_the_dataclass_defaults():
  # One source of defaults: base.py's ConfigDict is generated from the dataclasses.
  assert BASE.get_config().to_dict() == config_lib.to_dict(config_lib.TrainConfig())
  assert config_lib.from_config_dict(BASE.get_config()) == config_lib.TrainConfig()


def test_one_mesh_config_and_no_second_model_config():
  """The run's mesh section is graft_jax.sharding.MeshConfig itself; no run config class
  reuses graft_jax.models.ModelConfig's name."""
  import dataclasses
  import typing
  from graft_jax import models, sharding
  seen, todo = set(), [config_lib.TrainConfig]
  while todo:
    cls = todo.pop()
    seen.add(cls)
    todo += [h for h in typing.get_type_hints(cls).values() if dataclasses.is_dataclass(h)]
  assert typing.get_type_hints(config_lib.TrainConfig)['mesh'] is sharding.MeshConfig
  assert [c for c in seen if c.__name__.startswith('Mesh')] == [sharding.MeshConfig]
  assert models.ModelConfig.__name__ not in {c.__name__ for c in seen}


def test_mesh_errors_name_the_axis():
  for overrides, field in ((('mesh.fsdp=0',), 'mesh.fsdp'),
                           (('mesh.data=-1', 'mesh.tensor=-1'), 'mesh')):
    cd = config_lib.load_config(str(CONFIGS / 'toy.py'))
    config_lib.apply_overrides(cd, list(overrides), flag='')
    with pytest.raises(config_lib.ConfigError) as e:
      config_lib.from_config_dict(cd)
    assert e.value.field == field, str(e.value)


def test_paper_defaults():
  cfg = config_lib.from_config_dict(
      config_lib.load_config(str(CONFIGS / 'pair_smollm3_qwen3.py')))
  assert (cfg.prompts_per_step, cfg.n, cfg.num_minibatches, cfg.ppo_epochs) == (
      128, 8, 4, 1)
  assert (cfg.max_prompt_len, cfg.max_response_len) == (2048, 4096)
  assert (cfg.clip_low, cfg.clip_high, cfg.graft.delta) == (0.2, 0.28, 0.8)
  assert cfg.optimizer.lr == 1e-6 and cfg.optimizer.weight_decay == 0.01
  assert (cfg.eval.temperature, cfg.eval.top_p) == (0.6, 0.95)
  # The paper validates every 5 steps at k=8 (the defaults); the pair configs twice an
  # epoch at k=4, within the plan's validation budget (tests/plan/test_phases.py).
  assert (config_lib.EvalConfig().every_steps, config_lib.EvalConfig().k) == (5, 8)
  assert (cfg.eval.every_steps, cfg.eval.k) == (29, 4)
  assert cfg.hacpo.ratio_clamp == (0.1, 10.0)
  # JAX rollouts from the slot pool; the static sampler stays the field's default, the
  # reference engine.
  assert (cfg.engine, cfg.rollout.sampler) == ('jax', 'pool')
  assert config_lib.RolloutConfig().sampler == 'static'
  # MATH train: 7500 // 128 = 58 full batches per epoch, 3 epochs.
  assert cfg.num_steps(7500) == 174
  assert cfg.model_a.name != cfg.model_b.name


@pytest.mark.parametrize('preset', sorted(BASE.PRESETS))
def test_every_preset_validates(preset):
  d = BASE.get_config(preset).to_dict()
  if d['method'] == 'replay':
    d['replay']['log_dir'] = 'runs/other/peer_logs'
  config_lib.from_config_dict(d)


def test_presets_compose_and_name_the_workdir():
  cfg = config_lib.from_config_dict(
      config_lib.load_config(str(CONFIGS / 'toy.py') + ':grpo16,dr_grpo'))
  assert (cfg.method, cfg.n, cfg.scale_by_std) == ('grpo', 16, False)
  assert cfg.workdir == 'runs/toy/grpo16_dr_grpo'


def test_unknown_preset():
  with pytest.raises(ValueError, match="unknown config preset 'grpo7'"):
    BASE.get_config('grpo7')


INVALID = [
    (dict(graft__delta=1.5), 'graft.delta must be in [0, 1), got 1.5'),
    (dict(graft__delta=-0.1), 'graft.delta must be in [0, 1), got -0.1'),
    (dict(num_minibatches=3),
     'num_minibatches (3) must divide prompts_per_step (128)'),
    (dict(num_minibatches=0), 'num_minibatches must be >= 1, got 0'),
    (dict(n=1), 'n must be >= 2, got 1'),
    (dict(prompts_per_step=0), 'prompts_per_step must be >= 1, got 0'),
    (dict(ppo_epochs=0), 'ppo_epochs must be >= 1, got 0'),
    (dict(total_steps=-1), 'total_steps must be >= 0, got -1'),
    (dict(epochs=0), 'epochs must be >= 1, got 0'),
    (dict(max_response_len=0), 'max_response_len must be >= 1, got 0'),
    (dict(replay__balance=False), 'unknown config key replay.balance (known: log_dir)'),
    (dict(logging__every_steps=1), 'unknown config key logging.every_steps'),
    (dict(model_a__template='plain'), 'unknown config key model_a.template'),
    (dict(optimizer__name='adamw'), 'unknown config key optimizer.name'),
    (dict(graft__order='last'), "graft.order must be one of peer_last, "
                                "peer_first, uniform, got 'last'"),
    (dict(graft__advantages='mixed'), 'graft.advantages must be one of'),
    (dict(graft__transfer='all'), 'graft.transfer must be one of'),
    (dict(graft__gate='maybe'), 'graft.gate must be one of'),
    (dict(graft__ratio_level='word'), 'graft.ratio_level must be one of'),
    (dict(old_logp_source='vllm'), 'old_logp_source must be one of'),
    (dict(engine='sglang'), 'engine must be one of jax, vllm'),
    (dict(dtype='int8'), 'dtype must be one of'),
    (dict(checkpoint__export_dtype='bf16'), "checkpoint.export_dtype must be one of stored, "
     "bfloat16, float32, float16, got 'bf16' (did you mean 'bfloat16'?)"),
    (dict(perf__decode_attention='cpu'),
     "perf.decode_attention must be one of auto, xla, kernel, got 'cpu'"),
    (dict(perf__decode_attention='kernel', dtype='bfloat16'),
     "perf.decode_attention='kernel' takes dtype=float32 (the CPU kernel is f32 only), got "
     "dtype='bfloat16'"),
    (dict(perf__remat='dots'), "perf.remat must be one of none, full, dots_saveable, "
     "dots_no_batch, got 'dots'"),
    (dict(perf__attention_impl='flash'), "perf.attention_impl must be one of auto, dense, "
     "blocked, cudnn, splash, got 'flash'"),
    (dict(perf__micro_batch_tokens=-1), 'perf.micro_batch_tokens must be >= 0, got -1'),
    (dict(perf__attention_block=0), 'perf.attention_block must be >= 1, got 0'),
    (dict(perf__sampler_max_kv_bytes=-1), 'perf.sampler_max_kv_bytes must be >= 0, got -1'),
    (dict(perf__scan_layers=1), 'perf.scan_layers must be bool, got int 1'),
    (dict(micro_batch_tokens=0), 'unknown config key micro_batch_tokens'),
    (dict(rollout__streams=0), 'unknown config key rollout.streams'),
    (dict(data__source='jsonl'), "data.source must be one of file, synthetic, got 'jsonl'"),
    (dict(reward__kind='math-verify'), "reward.kind must be one of math_verify, synthetic_exact "
     "or a dotted path pkg.module:function, got 'math-verify'"),
    (dict(reward__kind='pkg.module.function'), 'reward.kind must be one of'),
    (dict(hacpo__capability_window=0),
     'hacpo.capability_window must be >= 1, got 0'),
    (dict(hacpo__ratio_clamp=(2.0, 10.0)), 'hacpo.ratio_clamp must satisfy'),
    (dict(hacpo__ratio_clamp=(0.1,)), 'hacpo.ratio_clamp must have 2 entries'),
    (dict(hacpo__self_clip=(3e-4, 1.5)), 'hacpo.self_clip entries must be'),
    (dict(hacpo__cross_clip=1.2), 'hacpo.cross_clip must be in [0, 1]'),
    (dict(sgt__coef=-1.0), 'sgt.coef must be >= 0, got -1'),
    (dict(optimizer__lr=0.0), 'optimizer.lr must be > 0, got 0'),
    (dict(optimizer__b2=1.0), 'optimizer.b2 must be in [0, 1), got 1'),
    (dict(optimizer__grad_clip=-1.0), 'optimizer.grad_clip must be >= 0'),
    (dict(clip_low=1.0), 'clip_low must be in [0, 1), got 1'),
    (dict(clip_high=-0.1), 'clip_high must be >= 0, got -0.1'),
    (dict(rollout__top_p=0.0), 'rollout.top_p must be in (0, 1], got 0'),
    (dict(rollout__sampler='pooled'), "rollout.sampler must be one of static, pool"),
    (dict(rollout__pool_slots=0), 'rollout.pool_slots must be >= 1, got 0'),
    (dict(rollout__pool_prefill_chunk=0), 'rollout.pool_prefill_chunk must be >= 1, got 0'),
    (dict(rollout__pool_prefill_group=0), 'rollout.pool_prefill_group must be >= 1, got 0'),
    (dict(perf__sampler_streams=-1), 'perf.sampler_streams must be >= 0, got -1'),
    (dict(rollout__temperature=float('nan')), 'rollout.temperature must be'),
    (dict(reward__timeout_s=0.0), 'reward.timeout_s must be > 0, got 0'),
    (dict(eval__k=0), 'eval.k must be >= 1, got 0'),
    (dict(checkpoint__keep=0), 'checkpoint.keep must be >= 1, got 0'),
    (dict(vllm__gpu_memory_utilization=1.5),
     'vllm.gpu_memory_utilization must be in (0, 1], got 1.5'),
    (dict(vllm__max_restarts=-1), 'vllm.max_restarts must be >= 0, got -1'),
    (dict(vllm__health_every_s=0.0), 'vllm.health_every_s must be > 0, got 0'),
    (dict(vllm__max_concurrency=-1), 'vllm.max_concurrency must be >= 0, got -1'),
    (dict(vllm__sync_timeout_s=0.0), 'vllm.sync_timeout_s must be > 0, got 0'),
    (dict(vllm__probe_tolerance=-1e-3), 'vllm.probe_tolerance must be >= 0'),
    (dict(engine='vllm', vllm__max_model_len=4096),
     'vllm.max_model_len (4096) must be 0 or >= max_prompt_len + '
     'max_response_len (6144)'),
    (dict(mesh__fsdp=0), 'mesh.fsdp must be >= 1 or -1 (the rest), got 0'),
    (dict(mesh__fsdp=-1), 'at most one mesh axis may be -1'),
    (dict(model_b__name='model_a'),
     'model_a.name and model_b.name must differ'),
    (dict(model_a__name='a/b'), 'model_a.name must be a file-safe name'),
    (dict(data__source='synthetic', data__synthetic__families=()),
     'data.synthetic.families must not be empty'),
    # Types.
    (dict(n='8'), "n must be int, got str '8'"),
    (dict(n=True), 'n must be int, got bool True'),
    (dict(n=8.0), 'n must be int, got float 8.0'),
    (dict(scale_by_std=1), 'scale_by_std must be bool, got int 1'),
    (dict(graft=0.8), 'graft must be a mapping'),
    (dict(eval__suite='math500'), 'eval.suite must be a tuple'),
]


@pytest.mark.parametrize('updates,message', INVALID,
                         ids=[m[:40] for _, m in INVALID])
def test_invalid_value_names_the_field(updates, message):
  with pytest.raises(config_lib.ConfigError, match=re.escape(message)):
    config_lib.from_config_dict(_with(**updates))


def test_unknown_keys_are_rejected():
  d = _with()
  d['learning_rate'] = 1e-5
  with pytest.raises(config_lib.ConfigError,
                     match='unknown config key learning_rate'):
    config_lib.from_config_dict(d)
  d = _with()
  d['graft']['detla'] = 0.9
  with pytest.raises(config_lib.ConfigError,
                     match=r'unknown config key graft\.detla'):
    config_lib.from_config_dict(d)


def test_ints_are_accepted_for_floats_and_lists_for_tuples():
  cfg = config_lib.from_config_dict(
      _with(graft__delta=0, hacpo__ratio_clamp=[1, 10]))
  assert cfg.graft.delta == 0.0 and isinstance(cfg.graft.delta, float)
  assert cfg.hacpo.ratio_clamp == (1.0, 10.0)


def test_delta_sweep_is_a_config_change():
  for delta in (0.0, 0.8, 0.9):
    assert config_lib.from_config_dict(
        _with(graft__delta=delta)).graft.delta == delta


def test_derived_paths_and_steps():
  cfg = config_lib.from_config_dict(_with(workdir='w', total_steps=7))
  assert cfg.checkpoint_dir == 'w/checkpoints'
  assert cfg.peer_log_dir == 'w/peer_logs'
  assert cfg.num_steps(7500) == 7


def test_check_paths(tmp_path):
  a, b, data = tmp_path / 'a', tmp_path / 'b', tmp_path / 'train.jsonl'
  a.mkdir()
  b.mkdir()
  d = _with(model_a__path=str(a), model_b__path=str(b), workdir=str(tmp_path / 'w'),
            data__train_path=str(data))
  with pytest.raises(config_lib.PathError, match=f"model_a.path: no config.json in '{a}'"):
    config_lib.check_paths(config_lib.from_config_dict(d))
  (a / 'config.json').write_text('{}')
  (b / 'config.json').write_text('{}')
  with pytest.raises(FileNotFoundError, match='data.train_path: no such'):
    config_lib.check_paths(config_lib.from_config_dict(d))
  data.write_text('{}\n')
  # Validation on the paper's benchmarks needs their folder.
  with pytest.raises(config_lib.PathError, match='eval.data_dir: not set; it holds the validation '
                     'benchmarks math500, aime24, aime25, amc23, minerva'):
    config_lib.check_paths(config_lib.from_config_dict(d))
  d['eval']['data_dir'] = str(tmp_path)
  for name in ('math500', 'aime24', 'amc23'):
    (tmp_path / f'{name}.jsonl').write_text('{}\n')
  (tmp_path / 'aime25.parquet').write_text('')
  with pytest.raises(config_lib.PathError, match=r"eval.data_dir: no minerva.jsonl \(or .json, "
                     rf".parquet\) in '{tmp_path}' for eval.suite"):
    config_lib.check_paths(config_lib.from_config_dict(d))
  (tmp_path / 'minerva.json').write_text('[]')
  config_lib.check_paths(config_lib.from_config_dict(d))
  d['eval'].update(every_steps=0, data_dir='')
  config_lib.check_paths(config_lib.from_config_dict(d))
  d['eval'].update(every_steps=5, suite=('synthetic',))
  config_lib.check_paths(config_lib.from_config_dict(d))
  d['engine'] = 'vllm'
  d['vllm']['python'] = str(tmp_path / 'missing' / 'python')
  with pytest.raises(FileNotFoundError, match='vllm.python'):
    config_lib.check_paths(config_lib.from_config_dict(d))


def test_apply_overrides_sets_typed_fields_and_names_bad_ones():
  cd = config_lib.load_config("configs/toy.py:graft")
  with cd.unlocked():
    config_lib.apply_overrides(cd, ["optimizer.lr=3e-4", "prompts_per_step=32", "graft.delta=0",
                                    "graft.order=uniform", "logging.tensorboard=False"])
  cfg = config_lib.from_config_dict(cd)
  assert (cfg.optimizer.lr, cfg.prompts_per_step, cfg.graft.delta) == (3e-4, 32, 0.0)
  assert isinstance(cfg.graft.delta, float)
  assert cfg.graft.order == "uniform" and cfg.logging.tensorboard is False
  for bad, needle in (("optimizer.lrr=1", "no config field 'optimizer.lrr'"),
                      ("nope.lr=1", "no config field 'nope.lr'"),
                      ("prompts_per_step=many", "prompts_per_step=many"),
                      ("lr", "must look like")):
    with pytest.raises(config_lib.config_checks.ConfigError, match=needle):
      config_lib.apply_overrides(cd, [bad])


def test_moved_fields_are_gone_and_name_fields_that_exist():
  from graft_jax.config.load import flatten
  fields = set(flatten(config_lib.to_dict(config_lib.TrainConfig())))
  for old, new in config_lib.config_checks.MOVED.items():
    assert old not in fields and new in fields, (old, new)


@pytest.mark.parametrize('old,new', sorted(config_lib.config_checks.MOVED.items()))
def test_a_moved_fields_old_name_suggests_its_new_one(old, new):
  """``rollout.streams`` is nearer ``rollout.temperature`` by spelling than
  ``perf.sampler_streams``: the suggestion follows the move, not the letters."""
  cd = config_lib.load_config("configs/toy.py:graft")
  with pytest.raises(config_lib.ConfigError) as e:
    config_lib.apply_overrides(cd, [f'{old}=1'], flag='--config.')
  assert f'(did you mean {new!r}?)' in str(e.value) and '\n' not in str(e.value)


def test_did_you_mean_spells_out_the_closest_name_otherwise():
  known = ['perf.micro_batch_tokens', 'rollout.temperature', 'perf.sampler_streams']
  did_you_mean = config_lib.config_checks.did_you_mean
  assert did_you_mean('perf.micro_batch_token', known) == (
      " (did you mean 'perf.micro_batch_tokens'?)")
  assert did_you_mean('rollout.temprature', known) == " (did you mean 'rollout.temperature'?)"
  assert did_you_mean('rollout.streams', known[1:2]) == " (did you mean 'rollout.temperature'?)"
  assert did_you_mean('seed', known) == ''


def test_vllm_engine_settings_follow_the_config():
  """Every VLLMEngine recovery/check/sync argument comes from cfg.vllm (0 tolerance: by dtype)."""
  import inspect
  from graft_jax.rollout.vllm_engine import VLLMEngine
  from graft_jax.rollout.vllm_setup import vllm_engine_settings
  d = _with(vllm__check_every=3, vllm__probe_tolerance=0.0, vllm__max_restarts=5,
            vllm__request_timeout_s=60.0, vllm__health_every_s=2.5, vllm__max_concurrency=7,
            vllm__sync_timeout_s=30.0)
  got = vllm_engine_settings(config_lib.from_config_dict(d).vllm)
  assert got == dict(check_every=3, probe_tolerance=None, max_restarts=5,
                     request_timeout_s=60.0, health_every_s=2.5, max_concurrency=7,
                     weight_sync='auto',  # vllm_setup.sync_backend resolves it per run
                     sync_timeout_s=30.0)
  d['vllm']['probe_tolerance'] = 0.01
  assert vllm_engine_settings(config_lib.from_config_dict(d).vllm)['probe_tolerance'] == 0.01
  params = inspect.signature(VLLMEngine).parameters
  assert set(got) <= set(params) and all(params[k].kind == params[k].KEYWORD_ONLY for k in got)
