"""benchmarks/gpu_check.py --dry: the GPU check's whole sequence at tiny sizes on the CPU,
each section in a process of its own, through the same code the GPU machine runs. A
section that runs out of time is killed and said to be, and the others still report."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from graft_jax.plan import phases

pytestmark = pytest.mark.slow  # compiles tiny models' kernels, pool and two GRAFT steps
ROOT = pathlib.Path(__file__).resolve().parents[2]
# sampler_window is given 3 s: killed while JAX starts, between sections that run.
SECTIONS = "env_decode,sampler_window,packed,pool,step"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  out = tmp_path_factory.mktemp("gpu_check")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
  proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry", "--reps=1",
                         f"--sections={SECTIONS}", "--timeouts=sampler_window=3",
                         f"--out={out}"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=3000)
  lines = [json.loads(x) for x in (out / "gpu_check.jsonl").read_text().splitlines()]
  return out, lines, proc


def section(out, name):
  return json.loads((out / f"{name}.json").read_text())


def test_each_section_ran_in_its_own_process_and_left_its_line(report):
  out, lines, proc = report
  assert [x["section"] for x in lines] == SECTIONS.split(",")
  status = {x["section"]: x["status"] for x in lines}
  assert status.pop("sampler_window") == "timed out after 3 s"
  assert status == dict.fromkeys(status, "ok"), proc.stdout[-3000:] + proc.stderr[-3000:]
  assert proc.returncode == 1  # one section did not finish
  assert "gpu_check: sampler_window timed out after 3 s" in proc.stdout
  for name in status:
    got = section(out, name)
    assert got["section"] == name and got["dry"] and got["backend"] == "cpu"
    # The driver set JAX's share of the device before JAX started in each section.
    assert got["mem_fraction"] == "0.9"
    assert not [k for k, v in got.items() if isinstance(v, dict) and "error" in v], got


def test_the_live_span_kernel_matches_xla_and_reads_the_spans_blocks(report):
  got = section(report[0], "env_decode")
  assert got["environment"]["live_decode_by_default"] is False  # interpreted on a CPU
  for name in ("qwen3_1p7b", "smollm3_3b"):
    d = got[f"live_decode/{name}"]
    assert d["blocks_as_spans"] and d["max_rel_err_vs_xla_f32"] < 1e-2
    assert 0 < d["share_of_window_read"] < 1  # a finished row reads one block


def test_packed_attention_and_a_packed_micro_batch(report):
  got = section(report[0], "packed")
  # --dry traces the attention as for a GPU: the Pallas kernel, interpreted, not 'dense'.
  assert got["packed_attention"]["impl"].startswith("cudnn ('auto' on gpu); packed rows: pallas")
  assert 0 < got["packed_attention"]["max_rel_err_vs_dense"] < 5e-2
  mb = got["packed_micro_batch"]
  assert mb["sequences"] == 3
  assert mb["tokens_per_s"] * mb["seconds"] == pytest.approx(256 - 256 // 8)


def test_the_pool_keeps_its_slots(report):
  pool = section(report[0], "pool")["sampler_pool"]
  assert pool["slots"] == 8 and pool["decode_attention"] == "xla"  # 'live' on a GPU
  assert pool["tokens_per_s"] == pytest.approx(pool["tokens"] / pool["seconds"])


def test_two_steps_beside_the_plan_with_metrics_as_they_came(report):
  out = report[0]
  step = section(out, "step")["step"]
  want = set(phases.STEP_PHASES) | {"step"}
  assert set(step["measured"]) == want and want <= set(step["predicted"])
  assert sum(step["measured"][p] for p in phases.STEP_PHASES) <= step["measured"]["step"]
  assert step["predicted"]["step"] == pytest.approx(
      sum(step["predicted"][p] for p in phases.STEP_PHASES))
  assert all(step["predicted"][p] > 0 for p in ("sampling", "scoring", "update", "exchange"))
  assert step["compiles_step1"] > 0 and step["compile_s_step1"] > 0
  assert step["live_decode"] is False  # the pool's XLA attention here, and the plan's
  assert 0 < step["predicted"]["signal_fraction"] <= 1
  rows = [json.loads(x) for x in (out / "step" / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in rows] == [0, 1]
  assert "checkpoint_s" not in str(rows)  # no save ran


def test_an_unknown_section_is_one_line():
  proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry", "--sections=nope"],
                        cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 2
  assert "unknown section(s) ['nope']" in proc.stdout
