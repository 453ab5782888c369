"""launch/plan.py on a paper pair at short lengths: the fit per model, the phases with
their FLOPs and seconds, the step and the run's GPU-hours, exit status 0 when it fits."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # compiles two 2-3 B-parameter updates (abstract weights) on CPU
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_plan_prints_fit_phases_step_and_gpu_hours():
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
      [sys.executable, "launch/plan.py", "--config=configs/pair_smollm3_qwen3.py", "--devices=4",
       "--device-memory-gb=141", "--config.max_prompt_len=256", "--config.max_response_len=256",
       "--train-prompts=1024"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
  out = proc.stdout
  assert proc.returncode == 0, out[-2000:] + proc.stderr[-2000:]
  for model in ("smollm3_3b", "qwen3_1p7b"):
    assert re.search(rf"^{model} .* yes ", out, re.M), out
    for phase in ("sampling", "scoring", "update", "weight sync"):
      assert re.search(rf"^{model}\s+{phase}\s", out, re.M), (model, phase)
  # 1,024 prompts / 128 per step x 3 epochs = 24 steps
  runs = re.findall(r"step @ (.+?): (\d+) s; the run's (\d+) steps: .* (\d+) GPU-hours on 4", out)
  assert [r[0] for r in runs] == ["stated", "H200 check"] and all(r[2] == "24" for r in runs)
