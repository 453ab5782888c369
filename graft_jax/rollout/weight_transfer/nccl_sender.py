"""Weight push by NCCL broadcast from one trainer GPU to a vLLM server on other GPUs.

vLLM's NCCL backend (``--weight-transfer-config '{"backend": "nccl"}'``): the
trainer mints an ``ncclUniqueId`` and posts it to ``/init_weight_transfer_engine``
while it joins the group itself as rank 0 (the workers are ranks 1..W; the
rendezvous has no store, so both sides enter ``ncclCommInitRank`` together). The
workers' communicator all-reduces one float32 as it opens, which rank 0 must
match before anything else. A push is ``/start_weight_update``, then
``/update_weights`` with the full listing, which the server answers once every
tensor has landed, *while* this side broadcasts the packed buckets in the same
order; then ``/finish_weight_update``. Buckets follow vLLM's packed receiver
(``plan.vllm_packed_buckets``) because it cuts the byte stream by the same rule.
"""

from __future__ import annotations

import concurrent.futures

import jax
import numpy as np

from graft_jax.rollout.weight_transfer import cuda, dlpack, protocol
from graft_jax.rollout.weight_transfer.base import Sender
from graft_jax.rollout.weight_transfer.nccl import Nccl
from graft_jax.rollout.weight_transfer.plan import vllm_packed_buckets

BUCKET_BYTES = 512 << 20


class NcclSender(Sender):
  """NCCL push (see the module docstring); the group opens on the first push."""

  cut = staticmethod(vllm_packed_buckets)

  def __init__(self, sidecar, *, bucket_bytes: int = BUCKET_BYTES, library: str = "", **kw):
    super().__init__(sidecar, bucket_bytes=bucket_bytes, **kw)
    self.library = library
    self._nccl = self._driver = self._comm = None

  def _open(self) -> None:
    self._driver = cuda.Driver(self.device.local_hardware_id)
    self._nccl = Nccl(self.library)
    world = 1 + self.client.world_size()
    uid = self._nccl.unique_id()
    body = protocol.nccl_init(uid, world, bucket_bytes=self.bucket_bytes)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      joined = pool.submit(self.client.init, body)
      self._driver.current()
      comm = self._nccl.init_rank(uid, world, 0)
      warm = dlpack.buffer(jax.device_put(np.zeros(1, np.float32), self.device)
                           .block_until_ready())
      self._nccl.all_reduce_f32(comm, dlpack.on_gpu(warm).ptr, 1, self._driver.stream)
      self._driver.synchronize()
      joined.result()
    self._comm = comm

  def _push(self, plan, buckets, packed) -> int:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    received = pool.submit(self.client.update, protocol.nccl_update(plan))
    sent = 0
    try:
      for array in packed:
        if received.done():  # rejected before its first broadcast: fail, do not hang
          received.result()
        buf = dlpack.on_gpu(dlpack.buffer(array.block_until_ready()))
        self._nccl.broadcast_bytes(self._comm, buf.ptr, buf.nbytes, self._driver.stream)
        self._driver.synchronize()  # `array` may be freed once this returns
        sent += buf.nbytes
      received.result()
    except BaseException:
      self.close()  # a group with a failed broadcast cannot carry the next push
      raise
    finally:
      pool.shutdown(wait=False)
    return sent

  def _close(self) -> None:
    if self._comm is not None:
      self._nccl.abort(self._comm)
      self._comm = None
