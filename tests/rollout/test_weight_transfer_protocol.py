"""Our weight-transfer request bodies, parsed by the installed vLLM 0.32 itself.

A subprocess in .venv-vllm posts each body to vLLM's own RL routes (FastAPI
test client, no server, no GPU) and builds the backend dataclasses from what
the routes pass on, so a drift in field names, nesting or types fails here.
It also cuts tensors with vLLM's packed producer, the golden for our NCCL
bucket rule.
"""

import json
import subprocess

import ml_dtypes
import numpy as np
import pytest

from graft_jax.rollout.weight_transfer import ipc_handle, protocol
from graft_jax.rollout.weight_transfer.plan import WireTensor, vllm_packed_buckets
from vllm_fixtures import REPO as ROOT, require_vllm_python
PLAN = [WireTensor("model.embed_tokens.weight", (300, 64), np.dtype(ml_dtypes.bfloat16)),
        WireTensor("model.layers.0.self_attn.q_proj.weight", (64, 64), np.dtype(np.float16)),
        WireTensor("model.norm.weight", (64,), np.dtype(np.float32))]
UID = bytes(range(128))
HANDLE = bytes(range(100, 164))
PACKS = [([4, 4, 4, 4], 6), ([10, 1, 1], 6), ([1, 2, 3], 100), ([5, 5, 5], 10), ([7], 3),
         ([3, 3, 3, 3, 3], 9)]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  vllm_python = require_vllm_python()
  args = ipc_handle.rebuild_args(HANDLE, 1 << 20, 0)
  bodies = {
      "nccl_init": protocol.nccl_init(UID, 3, bucket_bytes=1 << 20, num_buffers=2),
      "ipc_init": protocol.ipc_init(),
      "nccl_update": protocol.nccl_update(PLAN),
      "ipc_update": protocol.ipc_update(PLAN, ipc_handle.pickled_handles({"a-b": args})),
      "start": {}, "finish": protocol.finish(7)}
  spec = tmp_path_factory.mktemp("wt") / "spec.json"
  spec.write_text(json.dumps({"bodies": bodies, "packs": PACKS}))
  out = subprocess.run([str(vllm_python), str(ROOT / "tests/rollout/weight_transfer_vllm_check.py"),
                        str(spec)], capture_output=True, text=True, timeout=600, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_routes_hand_the_engine_each_call(report):
  assert report["methods"] == {
      "nccl_init": "init_weight_transfer_engine", "ipc_init": "init_weight_transfer_engine",
      "nccl_update": "update_weights", "ipc_update": "update_weights",
      "start": "start_weight_update", "finish": "finish_weight_update"}
  assert report["finish_version"] == "7"


def test_nccl_init_uses_the_unique_id_rendezvous(report):
  assert report["nccl_init"] == {
      "master_address": None, "master_port": None, "rank_offset": 1, "world_size": 3,
      "packed": True, "packed_buffer_size_bytes": 1 << 20, "packed_num_buffers": 2,
      "unique_id_hex": UID.hex()}


def test_update_listings_name_torch_dtypes(report):
  dtypes = ["torch.bfloat16", "torch.float16", "torch.float32"]
  for kind in ("nccl_update", "ipc_update"):
    assert report[kind]["names"] == [t.name for t in PLAN]
    assert report[kind]["shapes"] == [[300, 64], [64, 64], [64]]
    assert report[kind]["dtypes"] == dtypes
  assert report["ipc_update"]["tensor_sizes"] == [300 * 64 * 2, 64 * 64 * 2, 64 * 4]


def test_ipc_handle_unpickles_to_rebuild_cuda_tensor_args(report):
  assert report["ipc_init"] == {"packed": True}
  got = report["ipc_update"]
  assert got["uuid"] == "a-b"
  assert got["tensor_cls"] and got["storage_cls"]
  assert got["dtype"] == "torch.uint8"
  assert got["tensor_size"] == [1 << 20] and got["storage_size_bytes"] == 1 << 20
  assert got["storage_handle_len"] == 64
  assert got["event_sync_required"] is False and got["requires_grad"] is False


def test_nccl_buckets_cut_where_vllms_packer_cuts(report):
  for (sizes, cap), golden in zip(PACKS, report["packs"]):
    plan = [WireTensor(str(i), (s,), np.dtype(np.uint8)) for i, s in enumerate(sizes)]
    assert vllm_packed_buckets(plan, cap) == golden, (sizes, cap)
