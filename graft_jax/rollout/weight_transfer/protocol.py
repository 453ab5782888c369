"""Request bodies of vLLM 0.32's weight-transfer routes, and a client that posts them.

The routes (``vllm/entrypoints/rl/online/api_router.py``) take each argument as
one embedded JSON field: ``{"init_info": {...}}``, ``{"update_info": {...}}``,
``{"weight_version": "..."}``. The dict inside is the backend's dataclass
(``NCCLWeightTransferInitInfo``, ``NCCLWeightTransferUpdateInfo``,
``IPCWeightTransferInitInfo``, ``IPCWeightTransferUpdateInfo``), built by the
server with ``cls(**dict)``, so the field names here are the contract;
``tests/rollout/test_weight_transfer_protocol.py`` checks them against the
installed vLLM.
"""

from __future__ import annotations

import base64

from graft_jax.rollout.weight_transfer.plan import WireTensor

# The worker ranks follow the single trainer rank 0 in the NCCL group.
WORKER_RANK_OFFSET = 1


def nccl_init(unique_id: bytes, world_size: int, *, bucket_bytes: int,
              num_buffers: int = 2) -> dict:
  """``/init_weight_transfer_engine`` for NCCL with a trainer-minted ``ncclUniqueId``
  (the torch-free rendezvous: standard, not URL-safe, base64 of the 128 bytes)."""
  return {"init_info": {
      "nccl_unique_id_b64": base64.b64encode(unique_id).decode("ascii"),
      "rank_offset": WORKER_RANK_OFFSET, "world_size": int(world_size), "packed": True,
      "packed_buffer_size_bytes": int(bucket_bytes), "packed_num_buffers": int(num_buffers)}}


def ipc_init() -> dict:
  """``/init_weight_transfer_engine`` for IPC: nothing to rendezvous; we always pack."""
  return {"init_info": {"packed": True}}


def _listing(tensors: list[WireTensor]) -> dict:
  return {"names": [t.name for t in tensors], "dtype_names": [t.dtype_name for t in tensors],
          "shapes": [list(t.shape) for t in tensors]}


def nccl_update(tensors: list[WireTensor]) -> dict:
  """``/update_weights`` for NCCL: the whole push's listing, in broadcast order."""
  return {"update_info": _listing(tensors)}


def ipc_update(tensors: list[WireTensor], handles_pickled: bytes) -> dict:
  """``/update_weights`` for one IPC bucket: its listing, the byte size of each tensor in
  the shared buffer, and the pickled ``{gpu uuid: rebuild args}`` (base64)."""
  return {"update_info": {**_listing(tensors), "tensor_sizes": [t.nbytes for t in tensors],
                          "ipc_handles_pickled": base64.b64encode(handles_pickled).decode(
                              "ascii")}}


def finish(version: int | str | None) -> dict:
  """``/finish_weight_update``; the version shows up in the server's ``/weight_info``."""
  return {} if version is None else {"weight_version": str(version)}


class Client:
  """The four weight-transfer calls (plus the prefix-cache reset) over `poster`, anything
  with ``post(path, body, *, timeout)`` and ``get(path, *, timeout)``, such as
  ``VLLMSidecar`` (which reaches its server's private socket)."""

  def __init__(self, poster, *, timeout: float = 600.0):
    self.poster = poster
    self.timeout = timeout

  def _post(self, path: str, body: dict) -> dict | None:
    return self.poster.post(path, body, timeout=self.timeout)

  def init(self, body: dict) -> None:
    self._post("/init_weight_transfer_engine", body)

  def start(self) -> None:
    self._post("/start_weight_update", {})

  def update(self, body: dict) -> None:
    self._post("/update_weights", body)

  def finish(self, version=None) -> None:
    self._post("/finish_weight_update", finish(version))
    # Cached prefixes hold keys/values computed by the old weights.
    out = self._post("/reset_prefix_cache", {}) or {}
    if not out.get("success", True):
      raise RuntimeError("/reset_prefix_cache refused after a weight update (requests "
                         "still running?); cached prefixes would mix old and new weights")

  def world_size(self) -> int:
    """Workers in the server (TP x PP x DP): the NCCL group is these plus the trainer."""
    return int(self.poster.get("/get_world_size?include_dp=true",
                               timeout=self.timeout)["world_size"])
