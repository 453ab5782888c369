"""Two CPU processes joined by ``jax.distributed`` train GRAFT on the shipped toy pair exactly as
one process does, write the run's files once, and resume exactly after one of them is SIGKILLed.

Every run has 4 CPU devices on a data 2 x fsdp 2 mesh (``train_child``): in a
two-process run the batch is split across the processes and the parameters
within each. The runs share a persistent compilation cache, so only the
first run of each process layout compiles.
"""

import json
import os
import signal

import numpy as np
import pytest

from graft_jax.outputs.metrics_writer import read_jsonl
from tests.distributed import procs

pytestmark = pytest.mark.slow  # five trainings of two models (about 4 minutes on 2 cores)
STEPS, TIMEOUT = 2, 900
CHILD = "tests.distributed.train_child"


def run(root, name, num_processes, die_at=None):
  workdir, port = root / name, procs.free_port()
  cache = dict(JAX_COMPILATION_CACHE_DIR=str(root / "jax_cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  logs = [root / f"{name}.{i}.{os.urandom(2).hex()}.log" for i in range(num_processes)]
  ps = [procs.spawn(CHILD, [workdir, STEPS, num_processes, i, port]
                    + ([die_at] if die_at is not None and i == 1 else []), logs[i], **cache)
        for i in range(num_processes)]
  if die_at is not None:
    # Process 1 kills itself at step `die_at`; its peer, blocked on it, is killed by us.
    code = ps[1].wait(timeout=TIMEOUT)
    assert code == -signal.SIGKILL, procs.tail(logs[1])
    os.kill(ps[0].pid, signal.SIGKILL)
  codes = procs.finish(ps, timeout=TIMEOUT)
  if die_at is None:
    assert codes == [0] * num_processes, "\n".join(procs.tail(l) for l in logs)
  return workdir


def params(workdir):
  with np.load(workdir / "final_params.npz") as f:
    return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("two_process")
  out = {"single": run(root, "single", 1), "two": run(root, "two", 2)}
  killed = run(root, "killed", 2, die_at=1)
  out["killed_rows"] = [r["step"] for r in read_jsonl(killed / "metrics.jsonl")]
  out["resumed"] = run(root, "killed", 2)
  return out


def test_two_processes_train_like_one(runs):
  one, two = params(runs["single"]), params(runs["two"])
  assert one.keys() == two.keys() and len(one) > 10
  for key in one:
    np.testing.assert_allclose(two[key], one[key], rtol=0, atol=1e-6, err_msg=key)
  rows = {w: read_jsonl(runs[w] / "metrics.jsonl") for w in ("single", "two")}
  assert sum(r["toy_a/exchange/grafted_groups"] + r["toy_b/exchange/grafted_groups"]
             for r in rows["two"]) > 0  # the steps really graft
  for a, b in zip(rows["single"], rows["two"]):
    assert a["m"] == b["m"] and a["toy_a/reward_mean"] == b["toy_a/reward_mean"]


def test_process_zero_writes_each_file_once(runs):
  workdir = runs["two"]
  lines = (workdir / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(l)["step"] for l in lines] == list(range(STEPS))
  found = json.loads((workdir / "files.json").read_text())
  assert found == [{"process": 0, "writer": True, "peer_log_writers": ["toy_a", "toy_b"]},
                   {"process": 1, "writer": False, "peer_log_writers": []}]
  import pyarrow.parquet as pq
  for name in ("toy_a", "toy_b"):
    steps = sorted((workdir / "peer_logs" / name).glob("step_*.parquet"))
    assert len(steps) == STEPS
    for path in steps:  # 4 prompts x n=4 responses, not twice that
      assert pq.read_table(path).num_rows == 16
  assert len(list((workdir / "tensorboard").glob("events.*"))) == 1


def test_killed_process_and_restart_resume_exactly(runs):
  assert runs["killed_rows"] == [0]  # died when step 1 began, after step 0's checkpoint
  resumed = runs["resumed"]
  assert [r["step"] for r in read_jsonl(resumed / "metrics.jsonl")] == list(range(STEPS))
  one, two = params(runs["two"]), params(resumed)
  for key in two:
    np.testing.assert_allclose(one[key], two[key], rtol=0, atol=1e-6, err_msg=key)
