"""Weight push by CUDA IPC to a vLLM server colocated on the trainer's GPU.

vLLM's IPC backend (``--weight-transfer-config '{"backend": "ipc"}'``, server
started with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``): the trainer exports one
staging allocation once, and per bucket copies the packed bytes into it
(device to device), then posts ``/update_weights`` with the bucket's listing
and the pickled handle; the server maps the allocation, clones the bucket out
and loads it before answering, so the next bucket may overwrite the buffer.
The staging buffer is a raw ``cuMemAlloc`` outside XLA's pool, because only an
allocation we own whole can be exported and mapped by another process. One
server GPU: the handle is keyed by this GPU's UUID only.
"""

from __future__ import annotations

from graft_jax.rollout.weight_transfer import cuda, dlpack, ipc_handle, protocol
from graft_jax.rollout.weight_transfer.base import Sender
from graft_jax.rollout.weight_transfer.plan import fit_buckets

BUCKET_BYTES = 256 << 20


class IpcSender(Sender):
  """IPC push (see the module docstring); the staging buffer is made on the first push."""

  cut = staticmethod(fit_buckets)

  def __init__(self, sidecar, *, bucket_bytes: int = BUCKET_BYTES, **kw):
    super().__init__(sidecar, bucket_bytes=bucket_bytes, **kw)
    self._driver = self._staging = self._handles = None

  def _open(self) -> None:
    workers = self.client.world_size()
    if workers != 1:
      raise RuntimeError(f"vllm.weight_sync='ipc' serves one colocated GPU; the server runs "
                         f"{workers} workers (use 'nccl' for tensor-parallel servers)")
    driver = cuda.Driver(self.device.local_hardware_id)
    self._staging = driver.alloc(self.bucket_bytes)
    args = ipc_handle.rebuild_args(driver.ipc_handle(self._staging), self.bucket_bytes,
                                   driver.ordinal)
    self._handles = ipc_handle.pickled_handles({driver.uuid(): args})
    self._driver = driver
    self.client.init(protocol.ipc_init())

  def _push(self, plan, buckets, packed) -> int:
    sent = 0
    for bucket, array in zip(buckets, packed):
      buf = dlpack.on_gpu(dlpack.buffer(array.block_until_ready()))
      self._driver.copy(self._staging, buf.ptr, buf.nbytes)
      self._driver.synchronize()  # the server reads the buffer as soon as we post
      self.client.update(protocol.ipc_update([plan[i] for i in bucket], self._handles))
      sent += buf.nbytes
    return sent

  def _close(self) -> None:
    if self._staging is not None:
      self._driver.free(self._staging)
      self._staging = None
