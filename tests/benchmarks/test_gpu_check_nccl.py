"""``benchmarks/gpu_check.py --dry --sections=nccl_local`` on a CPU: NCCL is reported absent,
not failed, and the staging of a push still runs, on the dry model."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_nccl_local_dry_reports_nccl_absent_and_stages_the_push(tmp_path):
  proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry",
                         "--sections=nccl_local", f"--out={tmp_path}"], cwd=ROOT,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  out = json.loads((tmp_path / "nccl_local.json").read_text())
  assert out["nccl_local/nccl"] == {"skipped": "JAX backend is cpu, NCCL needs a CUDA GPU"}
  assert "NCCL absent (JAX backend is cpu" in proc.stdout
  # gpu_check.DRY_MODEL's parameters by hand, each once (the tied embedding too), at 2
  # bytes in bf16: per layer q 64x64, k and v 64x32, o 64x64, q/k norms 16 each, gate, up
  # and down 64x128, two norms of 64; two layers, the 512x64 embedding, the final norm.
  layer = 4096 + 2048 + 2048 + 4096 + 16 + 16 + 3 * 8192 + 2 * 64
  staging = out["nccl_local/staging"]
  assert staging["bytes"] == 2 * (2 * layer + 512 * 64 + 64) and staging["buckets"] == 1
  assert staging["seconds"] > 0
