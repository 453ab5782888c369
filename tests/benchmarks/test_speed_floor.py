"""The speed benchmark's sampler floor (benchmarks/speed.py), counted by hand."""

import pytest

from benchmarks import speed
from graft_jax.models import ModelConfig


def test_sampler_floor_by_hand():
  cfg = ModelConfig(model_type="qwen3", vocab_size=10, hidden_size=4, intermediate_size=6,
                    num_layers=2, num_heads=2, num_kv_heads=1, head_dim=3)
  # Per layer: q 4x6 + o 6x4 = 48, k and v 4x3 each = 24, gate/up/down 3 x 4x6 = 72.
  per_token_flops = 2 * ((48 + 24 + 72) * 2 + 10 * 4)
  rows, prompt, new = 5, 7, 40
  # Step i (0..39) reads the 7 prompt slots and the i + 1 filled since: 40 x 7 + (1 + ... + 40)
  # = 280 + 820 slots; a slot is rows x layers x (k, v) x 1 kv head x 3 dims x 4 bytes.
  slot_bytes = rows * 2 * 2 * 1 * 3 * 4
  kv_bytes = slot_bytes * 1100
  out = speed.sampler_floor(cfg, rows, prompt, new, flops_per_s=1e3, bytes_per_s=1e2)
  assert out["kv_bytes"] == kv_bytes
  assert out["matmul_s"] == pytest.approx(per_token_flops * rows * new / 1e3)
  assert out["kv_s"] == pytest.approx(kv_bytes / 1e2)
  assert out["floor_s"] == pytest.approx(out["matmul_s"] + out["kv_s"])
