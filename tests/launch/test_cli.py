"""graft_jax.cli and graft_jax.outputs.progress without a subprocess: the --config flags, labels,
lines, the bar."""

import io
import re

import pytest
from absl import flags

from graft_jax import cli
from graft_jax.config import load as config_load
from graft_jax.data import DataError
from graft_jax.models import hf_io
from graft_jax.outputs import peer_log
from graft_jax.outputs import checkpoint
from graft_jax.config import checks as config_checks
from graft_jax.outputs import progress
from tests.launch.conftest import REPO


@pytest.mark.parametrize("exc,line,code", [
    (config_checks.ConfigError("n must be >= 2, got 1", field="n"),
     "config error: n must be >= 2, got 1 (from --config.n=1)", 2),
    (config_checks.PathError("model_a.path", "no such folder '/m'"),
     "path error: model_a.path: no such folder '/m'", 2),
    (FileNotFoundError("data file not found: /d.jsonl"),
     "path error: data file not found: /d.jsonl", 2),
    (DataError("/d.jsonl", "line 3", "answer", "missing"),
     "data error: /d.jsonl: line 3: field 'answer': missing", 1),
    (checkpoint.CheckpointError("/w/checkpoints/4: unreadable"),
     "checkpoint error: /w/checkpoints/4: unreadable", 1),
    (hf_io.CheckpointError("/m/config.json: missing field 'vocab_size'"),
     "model load error: /m/config.json: missing field 'vocab_size'", 1),
    (peer_log.PeerLogError("/l/step_00000001.parquet: checksum mismatch"),
     "peer log error: /l/step_00000001.parquet: checksum mismatch", 1),
    (FileNotFoundError("2 benchmark file(s) not found:\n  A: /a\n  B: /b\nPoint the suite"),
     "path error: 2 benchmark file(s) not found: A: /a; B: /b; Point the suite", 2),
])
def test_one_line_labels_and_exit_codes(exc, line, code):
  want = line if code == 2 else f"{line} [--verbose or GRAFT_VERBOSE=1 for the traceback]"
  assert cli.one_line(exc, {"n": "--config.n=1", "model_a.path": "--config.model_a.path=/m"}) == want
  assert cli.exit_code(exc) == code and cli.is_project_error(exc)


def test_each_preflight_failure_is_a_line_of_its_own():
  from graft_jax.train.preflight import PreflightError
  exc = PreflightError([config_checks.ConfigError("GPU 3 is not the job's", field="n"),
                        config_checks.ConfigError("/dev/shm has 0.06 GiB free:\nmore room")])
  assert cli.one_line(exc, {"n": "--config.n=3"}).splitlines() == [
      "preflight error: GPU 3 is not the job's (from --config.n=3)",
      "preflight error: /dev/shm has 0.06 GiB free: more room"]
  assert cli.exit_code(exc) == cli.USAGE_EXIT  # nothing ran


def test_other_errors_are_bugs_and_keep_their_traceback():
  assert not cli.is_project_error(KeyError("x"))
  assert not cli.is_project_error(ValueError("x"))
  assert not cli.is_project_error(ConnectionResetError("peer reset"))  # an OSError, not a path


def _parse(*args, default="configs/toy.py"):
  """``cli.parse_flags`` on ``args`` into fresh absl flags (as a launcher's ``cli.run`` does)."""
  return cli.parse_flags(["launcher", *args], default, flag_values=flags.FlagValues())


@pytest.mark.parametrize("args,field,want", [
    (["--config.optimizer.lr=1"], "optimizer.lr", 1.0),  # an int for a float field
    (["--config.graft.delta", "0.5"], "graft.delta", 0.5),  # the value as the next argument
    (["--config.logging.tensorboard=False"], "logging.tensorboard", False),
    (["--config.logging.tensorboard=false"], "logging.tensorboard", False),
    (["--noconfig.logging.tensorboard"], "logging.tensorboard", False),
    (["--config.logging.progress_bar=False", "--config.logging.progress_bar=True"],
     "logging.progress_bar", True),  # the last one counts
    (["--config.vllm.gpus.model_a=(1,)"], "vllm.gpus.model_a", (1,)),
    (["--config.jax_devices=0,1"], "jax_devices", (0, 1)),
    (["--config.eval.suite=math500,aime24"], "eval.suite", ("math500", "aime24")),
    (["--config.eval.suite=math500", "--config.eval.suite=aime24"], "eval.suite",
     ("math500", "aime24")),  # a tuple's entries, one flag each
    (["--config.eval.suite='a,b'"], "eval.suite", ("a,b",)),  # quoted: one string
    (["--config.models=[{'path': 'p', 'name': 'x'}]"], "models", ({"path": "p", "name": "x"},)),
    (["--config.model_a.name=123"], "model_a.name", "123"),  # a str field keeps the text
    (["--config=configs/toy.py:grpo16", "--config.n=4"], "n", 4),
])
def test_config_flags_set_typed_fields_and_name_the_flag(args, field, want):
  config_dict, sources = _parse(*args)
  got = config_load.flatten(config_dict)[field]
  assert got == want and type(got) is type(want)
  assert sources == {field: f"--config.{field}={want}"}


def test_no_override_loads_the_default_locked_and_a_required_config_says_so():
  config_dict, sources = _parse()
  assert (config_dict.n, sources) == (8, {})
  with pytest.raises(AttributeError):
    config_dict.nn = 1  # a typo in a launcher's main is an error, not a new field
  with pytest.raises(cli.UsageError, match=r"^--config=path.py\[:arg\] is required$"):
    _parse(default=None)


@pytest.mark.parametrize("args,line", [
    (["--config.optimizer.lrr=1"], "config error: --config.optimizer.lrr=1: no config field "
     "'optimizer.lrr' (did you mean 'optimizer.lr'?)"),
    (["--config=configs/toy.py:graft", "--config.grft.delta", "0.9"], "config error: "
     "--config.grft.delta: no config field 'grft.delta' (did you mean 'graft.delta'?)"),
    (["--config.n=abc"], "config error: --config.n=abc: n must be int, got 'abc'"),
    (["--config.n=True"], "config error: --config.n=True: n must be int, got 'True'"),
    (["--config.logging.tensorboard=maybe"], "config error: --config.logging.tensorboard=maybe: "
     "logging.tensorboard must be bool, got 'maybe'"),
    (["--config.optimizer.lr=fast"], "config error: --config.optimizer.lr=fast: optimizer.lr must "
     "be float, got 'fast'"),
    (["--config.n"], "usage error: Missing value for flag --config.n"),
    (["--config.optimizer={'lr': 1.0}"], "config error: --config.optimizer: 'optimizer' is a "
     "group of fields; set one of them, e.g. --config.optimizer.lr=..."),  # not the whole group
    (["--config.models.0.path=z"], "config error: --config.models.0.path=z: 'models' is a list; "
     "set it whole (--config.models=\"[...]\", a Python literal)"),
    (["--config=configs/nope.py", "--config.n=2"],
     f"config error: no config file '{REPO / 'configs' / 'nope.py'}'"),
    (["--config=configs/nope.py"], f"config error: no config file '{REPO / 'configs' / 'nope.py'}'"),
    (["--config.n=2", "--config=configs/toy.py"],
     "usage error: Found --config.n=2 in argv before a value for --config was specified"),
    (["graft"], "usage error: unexpected argument 'graft' (flags look like --name=value)"),
])
def test_config_flag_mistakes_are_one_line(args, line):
  with pytest.raises(Exception) as e:  # noqa: B017  (the type is what one_line labels)
    _parse(*args)
  assert (cli.one_line(e.value), cli.exit_code(e.value)) == (line, 2)


def test_an_unknown_preset_is_the_files_own_error_on_one_line():
  with pytest.raises(config_checks.ConfigError) as e:
    _parse("--config=configs/toy.py:nope")
  assert re.fullmatch(r"config error: configs/toy.py:nope: unknown config preset 'nope'; "
                      r"known: graft, grpo, .*", cli.one_line(e.value))


def test_overrides_carry_the_flags_to_other_configs():
  """launch/toy_job.py: fields read once by the flags, then set on each method's preset."""
  values = flags.FlagValues()
  cli.parse_flags(["launcher", "--config.optimizer.lr=3e-4", "--config.eval.suite=a,b"],
                  "configs/toy.py", flag_values=values)
  assert cli.overrides(values) == {"optimizer.lr": 3e-4, "eval.suite": ("a", "b")}
  config_dict = config_load.load_config("configs/toy.py:grpo")
  config_load.apply_overrides(config_dict, cli.overrides(values), flag="--config.")
  assert (config_dict.optimizer.lr, config_dict.eval.suite, config_dict.n) == (3e-4, ("a", "b"), 8)


RECORD = {"step": 0, "toy_a/reward_mean": 0.3125, "toy_b/reward_mean": 0.5,
          "toy_a/exchange/grafted_groups": 2, "toy_a/exchange/peer_offered": 16,
          "toy_a/exchange/admitted": 11, "toy_b/exchange/grafted_groups": 0,
          "toy_b/exchange/peer_offered": 0, "toy_b/exchange/admitted": 0,
          "toy_a/update/loss": 0.1, "toy_b/eval/average": 0.25}


def test_headline_names_each_model():
  assert progress.headline(RECORD, {"toy_b": 0.25}) == (
      "toy_a: reward 0.312 grafted 2 admitted 11/16 | "
      "toy_b: reward 0.5 grafted 0 admitted 0/0 val 0.25")
  assert progress.headline({"a/reward_mean": 1.0}) == "a: reward 1"


def test_bar_counts_completed_steps():
  out = io.StringIO()
  bar = progress.ProgressBar(3, 0, file=out)
  try:
    bar.update(0, RECORD)  # step 0 done: one step completed, not zero
    assert bar._bar.n == 1
    bar.update(2, RECORD)
    assert bar._bar.n == 3
    progress.phase("validating…")
    assert bar._bar.desc == "validating…"
  finally:
    bar.close()
  assert "3/3" in out.getvalue() and "toy_b: reward 0.5 grafted 0 admitted 0/0 val 0.25" in out.getvalue()


def test_summary_lists_pass_at_1_and_outputs():
  text = progress.summary(
      workdir="runs/x", steps=24, method="graft", seconds=61.4,
      history={"toy_a": [(4, 0.25), (9, 0.5), (23, 0.375)], "toy_b": []},
      outputs=[("runs/x/metrics.jsonl", "metrics"), ("runs/x/checkpoints", "ckpt")])
  assert text.splitlines() == [
      "done: graft, 24 steps in runs/x (61 s)",
      "validation pass@1 (average over the suite):",
      "  toy_a: final 0.3750 (after step 24), best 0.5000 (after step 10)",
      "wrote:",
      "  runs/x/metrics.jsonl  metrics",
      "  runs/x/checkpoints    ckpt"]
