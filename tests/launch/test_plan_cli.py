"""launch/plan.py on a paper pair at short lengths: the fit per model, every phase per
engine, the step and the run's GPU-hours, exit status 0 when it fits."""

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
  # 1,024 prompts / 128 per step x 3 epochs = 24 steps, for each engine
  assert re.findall(r"^engine (\w+): 4 GPUs, (\d+) steps", out, re.M) == [
      ("jax", "24"), ("vllm", "24")], out
  for phase in ("sampling", "rewards", "exchange", "scoring", "update"):
    assert len(re.findall(rf"^  {phase}\s+[\d.]+ s\s+[\d.]+ s\s+[\d.]+ s", out, re.M)) == 2, phase
  hours = re.findall(r"^  run: (\d+) GPU-hours without validation, (\d+) with", out, re.M)
  assert len(hours) == 2 and all(int(a) <= int(b) for a, b in hours), out
  assert "step @" not in out  # the live-context estimate is gone
  # vLLM's two placements side by side: replicas on every GPU against a GPU per model.
  ratio = re.search(r"^  sampling per step ([\d.]+) s vs ([\d.]+) s \(([\d.]+)x\)", out, re.M)
  assert ratio, out
  assert float(ratio[3]) < 1 and abs(float(ratio[3]) - float(ratio[1]) / float(ratio[2])) < 0.02


def test_plan_prints_the_vllm_placement_per_gpu_and_the_sync_seconds():
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
      [sys.executable, "launch/plan.py", "--config=configs/pair_smollm3_qwen3.py:graft,vllm",
       "--devices=4", "--device-memory-gb=141", "--processes=2",
       "--config.max_prompt_len=256", "--config.max_response_len=256", "--train-prompts=1024",
       # One server per model on a GPU of its own: replicas need a single trainer process.
       "--config.vllm.data_parallel=1", "--config.vllm.gpus.model_a=(2,)",
       "--config.vllm.gpus.model_b=(3,)", "--config.vllm.gpu_memory_utilization=0.45"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
  out = proc.stdout
  assert proc.returncode == 0, out[-2000:] + proc.stderr[-2000:]
  # The trainer on every GPU at 0.5, a server on GPUs 2 and 3.
  assert "placement on 4 GPUs of 131.32 GiB (weight sync: nccl;" in out, out
  for gpu in (0, 1):
    assert re.search(rf"^GPU {gpu}: trainer 0.50 = 65.66 GiB \(needs [\d.]+ GiB\); total 0.50$",
                     out, re.M), out
  assert re.search(r"^GPU 2: trainer 0.50 .*; vLLM smollm3_3b 0.45 = 59.09 GiB \(needs 5.73 GiB\);"
                   r" total 0.95$", out, re.M), out
  assert re.search(r"^GPU 3: .*vLLM qwen3_1p7b 0.45 .* total 0.95$", out, re.M), out
  assert "2 trainer process(es) (this run: nccl)" in out
  # Qwen3-1.7B, bf16, tied embedding once: 3.44 GB; over 2 processes half is gathered first.
  b = 2 * 1_720_574_976
  assert (f"qwen3_1p7b      reload {b / 0.2e9:.2f} s, nccl, process 0 gathers "
          f"{b / 2 / 20e9 + b / 100e9:.2f} s, nccl, each process sends its shards "
          f"{b / 100e9:.2f} s") in out, out
