"""W&B logging: what an offline W&B run records, read back from W&B's own run file."""

import dataclasses
import json
import pathlib
import struct
import time

import pytest
from wandb.proto import wandb_internal_pb2

from configs import toy
from graft_jax.config import run_config as config_lib
from graft_jax.config import checks as config_checks
from graft_jax.outputs import metrics_writer as metrics
from graft_jax.outputs.wandb_log import RUN_ID_FILE, WandbLog

_BLOCK, _HEADER = 32768, 7


def run_records(path: pathlib.Path) -> list:
  """The protobuf records of a ``.wandb`` file: a ':W&B' header of 7 bytes, then
  LevelDB-log records (crc32 u32, length u16, type u8: 1 full, 2 first, 3 middle,
  4 last) in 32 KiB blocks, a block's tail shorter than a header left as padding."""
  raw = path.read_bytes()
  assert raw[:4] == b":W&B"
  out, part, pos = [], b"", _HEADER
  while pos + _HEADER <= len(raw):
    space = _BLOCK - pos % _BLOCK
    if space < _HEADER:
      pos += space
      continue
    _, size, kind = struct.unpack("<IHB", raw[pos:pos + _HEADER])
    if pos + _HEADER + size > len(raw):  # still being written
      break
    part += raw[pos + _HEADER:pos + _HEADER + size]
    pos += _HEADER + size
    if kind in (1, 4):
      rec = wandb_internal_pb2.Record()
      rec.ParseFromString(part)
      out.append(rec)
      part = b""
  return out


def finished_run_records(path: pathlib.Path, timeout_s: float = 60.0) -> list:
  """`run_records` once W&B's service has written the run's closing ``exit`` record
  (``finish()`` can return before its writer has flushed the file)."""
  deadline = time.monotonic() + timeout_s
  while True:
    records = run_records(path)
    if any(r.WhichOneof("record_type") == "exit" for r in records):
      return records
    assert time.monotonic() < deadline, f"{path}: no exit record after {timeout_s} s"
    time.sleep(0.1)


def history(path: pathlib.Path) -> list[dict]:
  rows = []
  for rec in finished_run_records(path):
    if rec.WhichOneof("record_type") == "history":
      rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                   for i in rec.history.item if not (i.key or i.nested_key[0]).startswith("_")})
  return rows


def run_config(path: pathlib.Path) -> dict:
  for rec in finished_run_records(path):
    if rec.WhichOneof("record_type") == "run":
      return {i.key: json.loads(i.value_json) for i in rec.run.config.update}
  raise AssertionError(f"{path}: no run record")


def offline_runs(workdir: pathlib.Path) -> list[pathlib.Path]:
  return sorted(workdir.glob("wandb/offline-run-*/run-*.wandb"))


def test_each_row_is_logged_against_its_step_and_a_resume_keeps_the_run(tmp_path):
  config = {"method": "graft", "n": 8, "optimizer": {"lr": 1e-6}}
  log = WandbLog(tmp_path, project="p", mode="offline", config=config)
  log.log({"step": 0, "time": 1.0, "toy_a/reward_mean": 0.25, "toy_a/loss": None})
  log.log({"step": 1, "time": 2.0, "toy_a/reward_mean": 0.5, "toy_a/loss": -0.125})
  log.close()
  run_id = (tmp_path / RUN_ID_FILE).read_text().strip()
  [first] = offline_runs(tmp_path)
  assert first.name == f"run-{run_id}.wandb"
  # Non-finite values (null in metrics.jsonl) and the wall time stay out.
  assert history(first) == [{"step": 0, "toy_a/reward_mean": 0.25},
                            {"step": 1, "toy_a/reward_mean": 0.5, "toy_a/loss": -0.125}]
  # W&B plots every metric against our step, not its own counter.
  metric_records = [r.metric for r in finished_run_records(first)
                    if r.WhichOneof("record_type") == "metric"]
  assert [(m.glob_name, m.step_metric) for m in metric_records if m.glob_name] == [("*", "step")]
  got = run_config(first)
  assert got["method"] == "graft" and got["optimizer"] == {"lr": 1e-6}
  # The same workdir again (a resumed training): the same W&B run, its step logged again.
  again = WandbLog(tmp_path, project="p", mode="offline", config=config)
  again.log({"step": 1, "toy_a/reward_mean": 0.75})
  again.close()
  runs = offline_runs(tmp_path)
  assert [r.name for r in runs] == [f"run-{run_id}.wandb"] * 2
  assert history(runs[-1]) == [{"step": 1, "toy_a/reward_mean": 0.75}]


def test_the_metrics_writer_mirrors_each_row_to_wandb(tmp_path):
  with metrics.MetricsWriter(tmp_path, tensorboard=False, progress_bar=False,
                             wandb=dict(project="p", mode="offline", config={})) as w:
    w.write(0, {"toy_a": {"reward_mean": 0.5, "grad_norm": float("nan")}})
    w.write(1, {"toy_a": {"reward_mean": 0.625, "grad_norm": 2.0}})
  [run] = offline_runs(tmp_path)
  assert history(run) == [{"step": 0, "toy_a/reward_mean": 0.5},
                          {"step": 1, "toy_a/reward_mean": 0.625, "toy_a/grad_norm": 2.0}]
  assert [r["toy_a/grad_norm"] for r in metrics.read_jsonl(tmp_path / "metrics.jsonl")] == [
      None, 2.0]


def test_wandb_without_the_package_is_one_config_error(monkeypatch):
  cfg = config_lib.from_config_dict(toy.get_config("graft"))
  cfg = dataclasses.replace(cfg, logging=dataclasses.replace(cfg.logging, wandb=True))
  config_checks.validate(cfg)  # installed here: fine
  real = config_checks.importlib.util.find_spec
  monkeypatch.setattr(config_checks.importlib.util, "find_spec",
                      lambda name, *a: None if name == "wandb" else real(name, *a))
  with pytest.raises(config_checks.ConfigError, match=r"logging.wandb=true needs the wandb "
                     r"package: pip install -e '.\[wandb\]'"):
    config_checks.validate(cfg)


@pytest.mark.slow  # two tiny models train for a step
def test_a_training_run_logs_its_metrics_rows_to_wandb(tmp_path):
  from tests.train.test_trainer_methods import train  # pylint: disable=import-outside-toplevel
  _, rows = train("grpo", tmp_path, steps=1,
                  **{"logging.wandb": True, "logging.wandb_mode": "offline"})
  [run] = offline_runs(tmp_path)
  want = {k: v for k, v in rows[0].items() if k != "time" and isinstance(v, (int, float))}
  assert len(want) > 20 and "toy_a/reward_mean" in want
  assert history(run) == [pytest.approx(want)]
  assert run_config(run)["method"] == "grpo"


def test_the_run_summary_lists_the_wandb_folder():
  from graft_jax.outputs import progress  # pylint: disable=import-outside-toplevel
  cfg = config_lib.from_config_dict(toy.get_config("graft"))
  assert not any(p.endswith("wandb") for p, _ in progress.run_outputs(cfg))
  on = dataclasses.replace(cfg, logging=dataclasses.replace(cfg.logging, wandb=True,
                                                            wandb_mode="offline"))
  [(path, what)] = [(p, w) for p, w in progress.run_outputs(on) if p.endswith("wandb")]
  assert path == str(pathlib.Path(cfg.workdir, "wandb")) and "wandb sync" in what
