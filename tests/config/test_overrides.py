"""--config.<field>=<value> overrides: typed values, and unknown fields that name the closest."""

import pytest
from absl import flags

from graft_jax import cli
from graft_jax.config import run_config as config_lib
from graft_jax.config import load as config_load


def _toy():
  return config_lib.load_config('configs/toy.py:graft')


VALUES = [
    ('model_a.name=123', 'model_a.name', '123'),  # a str field keeps the text as typed
    ('logging.tensorboard=false', 'logging.tensorboard', False),
    ('logging.tensorboard=False', 'logging.tensorboard', False),
    ('logging.tensorboard=True', 'logging.tensorboard', True),
    ('eval.suite=math500,aime24', 'eval.suite', ('math500', 'aime24')),
    ('eval.suite=synthetic', 'eval.suite', ('synthetic',)),
    ('hacpo.ratio_clamp=(0.2, 5.0)', 'hacpo.ratio_clamp', (0.2, 5.0)),
    ('optimizer.lr=3', 'optimizer.lr', 3.0),
    ('optimizer.lr=3e-4', 'optimizer.lr', 3e-4),
    ('n=16', 'n', 16),
    ('jax_devices=0,1', 'jax_devices', (0, 1)),  # an empty tuple's entries: literals
    ('vllm.gpus.model_a=(1,)', 'vllm.gpus.model_a', (1,)),
    ("models=[{'path': 'p', 'name': 'x'}]", 'models', ({'path': 'p', 'name': 'x'},)),
]


@pytest.mark.parametrize('item,field,want', VALUES)
def test_values_follow_the_fields_type(item, field, want):
  cd = _toy()
  config_load.apply_overrides(cd, [item])
  got = config_load.flatten(cd)[field]
  assert got == want and type(got) is type(want)
  if field != 'models':  # models and model_a/model_b exclude each other
    config_lib.from_config_dict(cd)


@pytest.mark.parametrize('item,field,want', VALUES)
def test_a_flag_and_an_override_read_a_value_alike(item, field, want):
  """One parser: `--config.<item>` on a launcher's command line (cli.parse_flags) sets the
  field to what apply_overrides does, and its parsed value applies as is (toy_job)."""
  values = flags.FlagValues()
  flagged, _ = cli.parse_flags(['launcher', '--config=configs/toy.py:graft', f'--config.{item}'],
                               None, flag_values=values)
  got = config_load.flatten(flagged)[field]
  assert got == want and type(got) is type(want)
  cd = _toy()
  config_load.apply_overrides(cd, cli.overrides(values))
  assert config_load.flatten(cd) == config_load.flatten(flagged)


@pytest.mark.parametrize('item,message', [
    ('optimizer.lrr=1', "--config.optimizer.lrr=1: no config field 'optimizer.lrr' "
                        "(did you mean 'optimizer.lr'?)"),
    ('grft.delta=0.9', "--config.grft.delta=0.9: no config field 'grft.delta' "
                       "(did you mean 'graft.delta'?)"),
    ('zzz=1', "--config.zzz=1: no config field 'zzz'"),
    ('optimizer=1', "--config.optimizer=1: 'optimizer' is a group of fields; set one of them, "
                    "e.g. --config.optimizer.b1=..."),
    ('n=abc', "--config.n=abc: n must be int, got 'abc'"),
    ('n', '--config.n must look like --config.field.name=value'),
    ('logging.tensorboard=yes please', "--config.logging.tensorboard=yes please: "
                                       "logging.tensorboard must be bool, got 'yes please'"),
    ('optimizer.lr=1e-3,', "--config.optimizer.lr=1e-3,: optimizer.lr must be float, "
                           "got '1e-3,'"),
])
def test_bad_overrides_name_the_flag(item, message):
  with pytest.raises(config_lib.ConfigError) as err:
    config_load.apply_overrides(_toy(), [item], flag='--config.')
  assert str(err.value) == message


def test_unknown_preset_and_missing_file():
  with pytest.raises(config_lib.ConfigError, match=r"^configs/toy.py:grafft: unknown config "
                     r"preset 'grafft' \(did you mean 'graft'\?\); known: graft, grpo"):
    config_lib.load_config('configs/toy.py:grafft')
  with pytest.raises(config_lib.ConfigError, match='^no config file .*configs/nope.py'):
    config_lib.load_config('configs/nope.py')


def test_enum_errors_suggest_the_closest():
  d = _toy().to_dict()
  d['graft']['order'] = 'peer_lats'
  with pytest.raises(config_lib.ConfigError) as err:
    config_lib.from_config_dict(d)
  assert str(err.value).endswith("got 'peer_lats' (did you mean 'peer_last'?)")
  assert err.value.field == 'graft.order'
