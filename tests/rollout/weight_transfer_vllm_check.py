"""Run by .venv-vllm's python: parse our weight-transfer request bodies with vLLM 0.32's
own routes and dataclasses, and report what vLLM made of them as JSON on stdout.

argv[1]: a JSON file ``{"bodies": {name: body}, "packs": [[sizes, cap], ...]}``.
"""

import dataclasses
import inspect
import json
import os
import sys

os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # as the IPC sidecar is started

import torch  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from torch.multiprocessing.reductions import rebuild_cuda_tensor  # noqa: E402
from vllm.distributed.weight_transfer.ipc_engine import (  # noqa: E402
    IPCWeightTransferInitInfo, IPCWeightTransferUpdateInfo)
from vllm.distributed.weight_transfer.nccl_engine import (  # noqa: E402
    NCCLWeightTransferInitInfo, NCCLWeightTransferUpdateInfo)
from vllm.distributed.weight_transfer.packed_tensor import pack_tensors  # noqa: E402
from vllm.entrypoints.rl.online.api_router import router  # noqa: E402


class Recorder:
  """Stands in for the engine behind the routes: records what each route hands it."""

  def __init__(self):
    self.calls = []

  def __getattr__(self, name):
    async def record(*args, **kwargs):
      self.calls.append((name, args, kwargs))
    return record


def routed(bodies):
  """POST each body to its route; returns the request objects the engine received."""
  app = FastAPI()
  app.include_router(router)
  app.state.engine_client = engine = Recorder()
  client = TestClient(app)
  paths = {"nccl_init": "/init_weight_transfer_engine", "ipc_init": "/init_weight_transfer_engine",
           "nccl_update": "/update_weights", "ipc_update": "/update_weights",
           "start": "/start_weight_update", "finish": "/finish_weight_update"}
  out = {}
  for name, path in paths.items():
    engine.calls.clear()
    r = client.post(path, json=bodies[name])
    assert r.status_code == 200, (name, r.status_code, r.text)
    (method, args, kwargs), = engine.calls
    out[name] = (method, args, kwargs)
  return out


def boundaries(sizes, cap):
  """How vLLM's packed producer cuts tensors of `sizes` bytes (CPU tensors suffice)."""
  it = iter([(str(i), torch.zeros(s, dtype=torch.uint8)) for i, s in enumerate(sizes)])
  cuts = []
  while (chunk := pack_tensors(it, lambda item: item[1], cap)) is not None:
    cuts.append([int(n) for n in chunk.names])
  return cuts


def main():
  spec = json.load(open(sys.argv[1]))
  got = routed(spec["bodies"])
  report = {"methods": {k: v[0] for k, v in got.items()},
            "finish_version": got["finish"][1][0] if got["finish"][1] else
            got["finish"][2].get("weight_version")}
  init = NCCLWeightTransferInitInfo(**got["nccl_init"][1][0].init_info)
  report["nccl_init"] = {**{k: v for k, v in dataclasses.asdict(init).items()
                            if k != "nccl_unique_id_b64"},
                         "unique_id_hex": init.nccl_unique_id_bytes.hex()}
  upd = NCCLWeightTransferUpdateInfo(**got["nccl_update"][2]["request"].update_info)
  report["nccl_update"] = {"names": upd.names, "shapes": upd.shapes,
                           "dtypes": [str(getattr(torch, d)) for d in upd.dtype_names]}
  report["ipc_init"] = dataclasses.asdict(
      IPCWeightTransferInitInfo(**got["ipc_init"][1][0].init_info))
  ipc = IPCWeightTransferUpdateInfo(**got["ipc_update"][2]["request"].update_info)
  (uuid, args), = ipc.ipc_handles.items()
  bound = inspect.signature(rebuild_cuda_tensor).bind(*args).arguments
  report["ipc_update"] = {
      "names": ipc.names, "shapes": ipc.shapes, "tensor_sizes": ipc.tensor_sizes,
      "dtypes": [str(getattr(torch, d)) for d in ipc.dtype_names], "uuid": uuid,
      "tensor_cls": bound["tensor_cls"] is torch.Tensor,
      "storage_cls": bound["storage_cls"] is torch.UntypedStorage,
      "dtype": str(bound["dtype"]), "tensor_size": list(bound["tensor_size"]),
      "storage_size_bytes": bound["storage_size_bytes"],
      "storage_handle_len": len(bound["storage_handle"]),
      "event_sync_required": bound["event_sync_required"],
      "requires_grad": bound["requires_grad"]}
  report["packs"] = [boundaries(sizes, cap) for sizes, cap in spec["packs"]]
  print(json.dumps(report))


if __name__ == "__main__":
  main()
