"""The K=3 toy job: its run plan, the best-peer summary (hand-made results), and a smoke run."""

import json
import pathlib
import subprocess
import sys

import pytest

from graft_jax.experiments import toy_k3, toy_k3_report
from graft_jax.toy import spec

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_run_plan_has_grpo_every_pair_and_k3():
  members = toy_k3.members("r", spec.trio_config())
  assert members == [("r/model_a", "toy_a"), ("r/model_b", "toy_b"), ("r/model_c", "toy_c")]
  presets, models = toy_k3.run_plan(members)
  assert presets == {"grpo": "grpo", "pair_toy_a_toy_b": "graft", "pair_toy_a_toy_c": "graft",
                     "pair_toy_b_toy_c": "graft", "graft_k3": "graft"}
  assert models["pair_toy_a_toy_c"] == (members[0], members[2])
  assert models["graft_k3"] == models["grpo"] == members


def _evals(**by_model):
  return {n: {"t1": {"average": v, "pass1": {"add": v}}, "t06": {"average": v / 2,
                                                                  "pass1": {"add": v / 2}}}
          for n, v in by_model.items()}


def test_best_peer_is_the_pair_run_giving_the_model_its_highest_pass1():
  results = {"names": ["a", "b", "c"], "groups": ["add"], "eval_k": 1, "eval_problems": 4,
             "initial": _evals(a=0.1, b=0.2, c=0.3),
             "runs": {"grpo": {"evals": _evals(a=0.2, b=0.3, c=0.4)},
                      "pair_a_b": {"evals": _evals(a=0.5, b=0.35)},
                      "pair_a_c": {"evals": _evals(a=0.25, c=0.6)},
                      "pair_b_c": {"evals": _evals(b=0.45, c=0.55)},
                      "graft_k3": {"evals": _evals(a=0.7, b=0.4, c=0.5)}}}
  summary, best = toy_k3.k3_summary(results, "t1")
  assert best == {"a": "b", "b": "c", "c": "a"}  # by hand from the numbers above
  assert summary["b"] == pytest.approx({"initial": 20.0, "grpo": 30.0, "graft_pair": 45.0,
                                        "graft_k3": 40.0})
  results["summary"], results["best_peer"] = summary, best
  table = toy_k3_report.k3_table(results)
  assert "b" in table and "-5.0" in table  # b: K3 40.0 - pair 45.0


@pytest.mark.slow
def test_k3_job_prints_the_table_and_writes_its_files(tmp_path):
  proc = subprocess.run([sys.executable, "launch/toy_job.py", "--models", "3", "--smoke",
                         "--jobs", "1", "--workdir", str(tmp_path)],
                        cwd=ROOT, capture_output=True, text=True, timeout=1800)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "K=3: held-out pass@1 (%) at T=1.0" in proc.stdout
  assert "graft_k3             toy_c  <- toy_b" in proc.stdout
  results = json.loads((tmp_path / "results.json").read_text())
  assert set(results["summary"]) == {"toy_a", "toy_b", "toy_c"}
  for name, row in results["summary"].items():
    assert set(row) == {"initial", "grpo", "graft_pair", "graft_k3"}
    assert results["best_peer"][name] in set(results["summary"]) - {name}
  assert set(results["runs"]) == {"grpo", "pair_toy_a_toy_b", "pair_toy_a_toy_c",
                                  "pair_toy_b_toy_c", "graft_k3"}
  k3_rows = results["runs"]["graft_k3"]["curve"]
  assert [r["step"] for r in k3_rows] == [0, 1]
  # Per directed pair, the K-model metrics came through (numbers, not missing keys).
  assert all(k3_rows[0][f"toy_a/from/{s}/offered"] is not None for s in ("toy_b", "toy_c"))
  assert (tmp_path / "learning_curves.png").stat().st_size > 1000
  assert (tmp_path / "toy_trio" / "rl.jsonl").is_file()
