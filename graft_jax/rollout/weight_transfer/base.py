"""What the NCCL and IPC senders share: settings, and staging a push's buckets on the device."""

from __future__ import annotations

import time
from collections.abc import Callable

import jax

from graft_jax.rollout.weight_transfer import device, protocol
from graft_jax.rollout.weight_transfer.plan import WireTensor


class Sender:
  """Pushes a model's serving weights to one server.

  Every trainer process calls `send` (parameters other processes hold are gathered
  collectively); process 0 sends from `device` (default: its first local device).
  Process 0 gathers rather than each process sending its own shards because the
  server's GPUs receive every byte through their one link either way, so the
  broadcast takes as long; only the gather's (P-1)/P of the bytes would be saved,
  which ``launch/plan.py`` puts well under a second per step for the paper's
  models (`graft_jax.plan.step_time.sync_choices`), a fraction of a percent of a
  step; and vLLM's NCCL receiver takes every bucket from one broadcasting rank.
  `head_copy`: see `device.serving`. Subclasses set `cut` and implement `_open`
  (both sides of the transfer), `_close` and `_push`.
  """

  cut: Callable[[list[WireTensor], int], list[list[int]]]  # the bucket rule

  def __init__(self, sidecar, *, dtype: str = "bfloat16", bucket_bytes: int,
               device=None, head_copy: bool = False, timeout: float = 600.0):
    self.client = protocol.Client(sidecar, timeout=timeout)
    self.server = sidecar
    self._opened_for = None
    self.dtype = dtype
    self.bucket_bytes = int(bucket_bytes)
    self.head_copy = head_copy
    self.sender = jax.process_index() == 0
    self.device = device or jax.local_devices()[0]

  def send(self, model, version=None) -> dict[str, float]:
    """Pushes `model`'s weights as `version`; returns ``{"bytes", "seconds"}`` (zeros off
    process 0)."""
    t0 = time.perf_counter()
    staged = self._stage(model)
    if staged is None:
      return {"bytes": 0.0, "seconds": 0.0}
    self.client.start()
    sent = self._push(*staged)
    self.client.finish(version)
    return {"bytes": float(sent), "seconds": time.perf_counter() - t0}

  def _stage(self, model):
    """``(plan, buckets, packed arrays)`` on process 0; None elsewhere, after taking part
    in every gather."""
    if self.sender and self.device.platform != "gpu":
      raise RuntimeError(f"vllm.weight_sync needs the trainer on a CUDA GPU; the sending "
                         f"device is {self.device} ({self.device.platform})")
    plan, sources = device.serving(model, self.dtype, head_copy=self.head_copy)
    buckets = self.cut(plan, self.bucket_bytes)
    packed = device.packed_buckets(sources, buckets, self.device, sender=self.sender)
    if not self.sender:
      for _ in packed:  # the gathers are collectives: keep step with process 0
        pass
      return None
    # A restarted server (new process group) has no transfer engine open: open again.
    pgid = getattr(self.server, "pgid", None)  # VLLMSidecar.pgid(): its process group
    server = (pgid() if callable(pgid) else pgid) or "server"
    if self._opened_for != server:
      self.close()
      self._open()
      self._opened_for = server
    return plan, buckets, packed

  def close(self) -> None:
    """Releases this side of the transfer; the next push opens it again."""
    self._close()
    self._opened_for = None

  def _open(self) -> None:
    raise NotImplementedError

  def _push(self, plan, buckets, packed) -> int:
    """Moves the packed buckets between ``/start_weight_update`` and
    ``/finish_weight_update``; returns the bytes sent."""
    raise NotImplementedError

  def _close(self) -> None:
    raise NotImplementedError
