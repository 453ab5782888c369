"""Weight push by NCCL broadcast from one trainer GPU to a vLLM server on other GPUs.

vLLM's NCCL backend (``--weight-transfer-config '{"backend": "nccl"}'``): the
trainer mints an ``ncclUniqueId`` and posts it to ``/init_weight_transfer_engine``
while it joins the group itself as rank 0 (the workers are ranks 1..W; the
rendezvous has no store, so both sides create their communicators together). The
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

from graft_jax.rollout.weight_transfer import cuda, deadline, dlpack, protocol
from graft_jax.rollout.weight_transfer.base import Sender
from graft_jax.rollout.weight_transfer.nccl import Nccl
from graft_jax.rollout.weight_transfer.plan import vllm_packed_buckets

BUCKET_BYTES = 512 << 20


class NcclSender(Sender):
  """NCCL push (see the module docstring); the group opens on the first push. Every wait
  polls under `sync_timeout_s` (`deadline`): a server that never joins or stalls aborts
  the transfer instead of hanging the trainer."""

  cut = staticmethod(vllm_packed_buckets)

  def __init__(self, sidecar, *, bucket_bytes: int = BUCKET_BYTES, library: str = "",
               sync_timeout_s: float = deadline.DEFAULT_TIMEOUT_S, **kw):
    super().__init__(sidecar, bucket_bytes=bucket_bytes, **kw)
    self.library = library
    self.sync_timeout_s = sync_timeout_s
    self._nccl = self._driver = self._comm = None

  def _deadline(self) -> deadline.Deadline:
    name = getattr(self.server, "name", "vLLM server")
    return deadline.Deadline(self.sync_timeout_s, f"{name}: NCCL weight push")

  def _done(self) -> bool:
    """The communicator's last call has returned and the stream has run it."""
    return self._nccl.ready(self._comm) and self._driver.idle()

  def _open(self) -> None:
    self._driver = cuda.Driver(self.device.local_hardware_id)
    self._nccl = Nccl(self.library)
    world = 1 + self.client.world_size()
    uid = self._nccl.unique_id()
    body = protocol.nccl_init(uid, world, bucket_bytes=self.bucket_bytes)
    limit = self._deadline()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
      joined = pool.submit(self.client.init, body)
      self._driver.current()
      self._comm = self._nccl.init_rank(uid, world, 0)
      limit.wait(lambda: self._nccl.ready(self._comm), step="joining the server's group",
                 abort=self._close, peer=joined)
      warm = dlpack.buffer(jax.device_put(np.zeros(1, np.float32), self.device)
                           .block_until_ready())
      self._nccl.all_reduce_f32(self._comm, dlpack.on_gpu(warm).ptr, 1, self._driver.stream)
      limit.wait(self._done, step="the group's first all-reduce", abort=self._close,
                 peer=joined)
      limit.wait(joined.done, step="the server's init", abort=self._close, peer=joined)
    finally:
      pool.shutdown(wait=False)

  def _push(self, plan, buckets, packed) -> int:
    limit = self._deadline()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    received = pool.submit(self.client.update, protocol.nccl_update(plan))
    sent = 0
    try:
      for i, array in enumerate(packed):
        buf = dlpack.on_gpu(dlpack.buffer(array.block_until_ready()))
        self._nccl.broadcast_bytes(self._comm, buf.ptr, buf.nbytes, self._driver.stream)
        # `array` may be freed once the broadcast has run.
        limit.wait(self._done, step=f"bucket {i + 1} of {len(buckets)}", abort=self.close,
                   peer=received)
        sent += buf.nbytes
      limit.wait(received.done, step="the server's acknowledgement", abort=self.close,
                 peer=received)
    except BaseException:
      self.close()  # a group with a failed broadcast cannot carry the next push
      raise
    finally:
      pool.shutdown(wait=False)
    return sent

  def _close(self) -> None:
    if self._comm is not None:
      comm, self._comm = self._comm, None
      self._nccl.abort(comm)
