"""benchmarks/gpu_check.py --dry: every section runs at tiny sizes on the CPU, through the
same code the GPU machine runs, and reports figures that are internally consistent."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # compiles a tiny model's update, scorer and sampler
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  path = tmp_path_factory.mktemp("gpu_check") / "out.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry", "--reps=1",
                         f"--json={path}"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return json.loads(path.read_text()), proc.stdout


def test_every_section_reports_without_error(report):
  out, _ = report
  for key in ("attention/dense/128", "attention/blocked/256", "update/128", "update/256",
              "scoring", "sampler", "parity/blocked"):
    assert key in out and "error" not in out[key], (key, out.get(key))


def test_blocked_attention_agrees_with_dense_at_bf16(report):
  out, _ = report
  for t in (128, 256):
    assert out[f"attention/dense/{t}"]["max_rel_diff_vs_dense"] == 0.0
    assert out[f"attention/blocked/{t}"]["max_rel_diff_vs_dense"] < 2e-2  # bf16 inputs


def test_throughputs_follow_from_the_timings(report):
  out, _ = report
  for t in (128, 256):
    u = out[f"update/{t}"]
    assert u["tokens_per_s"] == pytest.approx(4 * t / u["seconds"])
    assert 0 < u["mfu"] < 1 and u["predicted_bytes"] > 0
  s = out["sampler"]
  assert 0 < s["tokens"] <= s["rows"] * s["max_new_tokens"]
  assert s["tokens_per_s"] == pytest.approx(s["tokens"] / s["seconds"])
  assert s["decode_attention"] == "auto"  # on a CPU; 'live' on a GPU (the live-span kernel)


def test_an_unknown_section_is_one_line():
  proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry", "--sections=nope"],
                        cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 2
  assert "unknown section(s) ['nope']" in proc.stdout


def test_blocked_log_probs_and_gradient_agree_with_dense_at_bf16(report):
  out, _ = report
  assert out["parity/blocked"]["max_abs_logp_diff"] < 5e-2
  assert out["parity/blocked"]["rel_grad_diff"] < 5e-2
