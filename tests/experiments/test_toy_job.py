"""CI smoke test of the README's main job: the tiny pair, 2 steps per method; checks outputs, not outcomes."""

import json
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_main_job_prints_the_table_and_writes_its_files(tmp_path):
  proc = subprocess.run([sys.executable, "launch/toy_job.py", "--smoke", "--workdir", str(tmp_path)],
                        cwd=ROOT, capture_output=True, text=True, timeout=1800)
  assert proc.returncode == 0, proc.stderr[-4000:]
  out = proc.stdout
  assert "updated model  peer" in out and "GRPO n=8" in out and "GRAFT" in out
  assert "Complementarity on held-out problems" in out
  assert "pass@1 (%) at T=1.0" in out and "at T=0.6, top-p 0.95" in out
  assert "Exchange under graft" in out
  assert (tmp_path / "learning_curves.png").stat().st_size > 1000
  results = json.loads((tmp_path / "results.json").read_text())
  assert set(results["runs"]) == {"grpo", "graft"}
  for run in results["runs"].values():
    assert [r["step"] for r in run["curve"]] == [0, 1]
    assert run["curve"][-1][f"{results['names'][0]}/eval"] is not None  # validated at the end
    for name in results["names"]:
      assert 0.0 <= run["evals"][name]["average"] <= 1.0
      assert run["evals"][name]["average"] == run["evals"][name]["t1"]["average"]
  # What outside checks read: held-out pass@1 in percent at T=1 per model and method.
  assert set(results["summary"]) == set(results["names"])
  for name, per_method in results["summary"].items():
    assert set(per_method) == {"initial", "grpo", "graft"}
    assert per_method["grpo"] == 100 * results["runs"]["grpo"]["evals"][name]["t1"]["average"]
    assert all(0.0 <= v <= 100.0 for v in per_method.values())
  for method in ("grpo", "graft"):
    assert (tmp_path / method / "metrics.jsonl").is_file()
    assert any((tmp_path / method / "peer_logs").iterdir())
