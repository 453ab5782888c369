"""graft_jax.cli and graft_jax.outputs.progress without a subprocess: labels, lines, the bar."""

import io

import pytest

from graft_jax import cli
from graft_jax.data import DataError
from graft_jax.models import hf_io
from graft_jax.train import checkpoint, peer_log
from graft_jax.config import checks as config_checks
from graft_jax.outputs import progress


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


def test_other_errors_are_bugs_and_keep_their_traceback():
  assert not cli.is_project_error(KeyError("x"))
  assert not cli.is_project_error(ValueError("x"))
  assert not cli.is_project_error(ConnectionResetError("peer reset"))  # an OSError, not a path


def test_split_config_flags():
  overrides, rest = cli.split_config_flags(
      ["--config=configs/toy.py:grpo", "--config.n=4", "--steps=2", "--config.graft.delta", "0.9"])
  assert overrides == ["n=4", "graft.delta=0.9"]
  assert rest == ["--config=configs/toy.py:grpo", "--steps=2"]
  with pytest.raises(cli.UsageError, match="--config.n needs a value"):
    cli.split_config_flags(["--config.n", "--steps=2"])


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
