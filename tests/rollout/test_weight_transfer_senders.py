"""The senders on a CPU trainer: refused with one clear line before any request is sent.
(The transfers themselves need CUDA: `benchmarks/gpu_weight_sync.sh`.)"""

import pytest
from flax import nnx

from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import weight_transfer


class Posts:
  """Records what a sender would post to the server."""

  url = "http://127.0.0.1:1"

  def __init__(self):
    self.paths = []

  def post(self, path, body=None, *, timeout):
    self.paths.append(path)


@pytest.mark.parametrize("backend", ["nccl", "ipc"])
def test_cpu_trainer_is_refused_before_any_request(backend):
  cfg = ModelConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                    num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                    max_position_embeddings=64, eos_token_ids=(1,))
  server = Posts()
  sender = weight_transfer.make_sender(backend, server, dtype="bfloat16", head_copy=True)
  with pytest.raises(RuntimeError, match="vllm.weight_sync needs the trainer on a CUDA GPU"):
    sender.send(init_model(cfg, rngs=nnx.Rngs(0)))
  assert server.paths == []
  sender.close()  # nothing opened: closing is a no-op


def test_unknown_backend_is_refused():
  with pytest.raises(ValueError, match="vllm.weight_sync='rdma'"):
    weight_transfer.make_sender("rdma", Posts())


def test_trainer_side_imports_neither_torch_nor_vllm():
  import subprocess
  import sys
  code = ("import sys; from graft_jax.rollout.weight_transfer import (base, cuda, device, "
          "dlpack, ipc_handle, ipc_sender, nccl, nccl_sender, plan, protocol); "
          "import graft_jax.rollout.vllm_engine; "
          "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm')))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, check=True)
  assert out.stdout.strip() == "[]"
