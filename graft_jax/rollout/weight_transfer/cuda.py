"""The few CUDA driver calls a push makes, through ctypes on ``libcuda.so.1``.

JAX runs on each device's primary context, so binding to it (not creating a
new one) lets NCCL and the copies here use JAX's buffers directly. Every call
makes that context current first: the HTTP threads of a push never touch CUDA,
but the caller's thread may have had another current.
"""

from __future__ import annotations

import ctypes

IPC_HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE
NOT_READY = 600  # CUDA_ERROR_NOT_READY


class _IpcHandle(ctypes.Structure):
  _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


class _Uuid(ctypes.Structure):
  _fields_ = [("bytes", ctypes.c_ubyte * 16)]


class Driver:
  """The CUDA driver bound to one device's primary context (CUDA ordinal `ordinal`)."""

  def __init__(self, ordinal: int, library: str = "libcuda.so.1"):
    self.lib = ctypes.CDLL(library)
    self.ordinal = ordinal
    self._check(self.lib.cuInit(0), "cuInit")
    self.device = ctypes.c_int()
    self._check(self.lib.cuDeviceGet(ctypes.byref(self.device), ordinal), "cuDeviceGet")
    self.context = ctypes.c_void_p()
    self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device),
                "cuDevicePrimaryCtxRetain")
    self.current()
    self.stream = ctypes.c_void_p()
    self._check(self.lib.cuStreamCreate(ctypes.byref(self.stream), 1), "cuStreamCreate")

  def _check(self, status: int, call: str) -> None:
    if status:
      name = ctypes.c_char_p()
      self.lib.cuGetErrorName(status, ctypes.byref(name))
      raise RuntimeError(f"CUDA {call} failed: {name.value and name.value.decode()} ({status})")

  def current(self) -> None:
    self._check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

  def synchronize(self) -> None:
    """Waits for everything queued on this driver's stream."""
    self.current()
    self._check(self.lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

  def idle(self) -> bool:
    """Whether everything queued on this driver's stream has run (``cuStreamQuery``): the
    non-blocking form of `synchronize`, for waits that must be able to give up."""
    self.current()
    status = self.lib.cuStreamQuery(self.stream)
    if status == NOT_READY:
      return False
    self._check(status, "cuStreamQuery")
    return True

  def alloc(self, nbytes: int) -> int:
    """A raw allocation, outside XLA's pool: the only memory we may export by IPC handle."""
    self.current()
    ptr = ctypes.c_uint64()
    self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)),
                f"cuMemAlloc({nbytes})")
    return ptr.value

  def free(self, ptr: int) -> None:
    self.current()
    self._check(self.lib.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")

  def copy(self, dst: int, src: int, nbytes: int) -> None:
    """Device-to-device copy, queued on this driver's stream."""
    self.current()
    self._check(self.lib.cuMemcpyDtoDAsync_v2(ctypes.c_uint64(dst), ctypes.c_uint64(src),
                                              ctypes.c_size_t(nbytes), self.stream),
                "cuMemcpyDtoDAsync")

  def ipc_handle(self, ptr: int) -> bytes:
    """The 64-byte ``cudaIpcMemHandle_t`` of the allocation starting at `ptr`."""
    self.current()
    handle = _IpcHandle()
    self._check(self.lib.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(ptr)),
                "cuIpcGetMemHandle")
    return bytes(bytearray(handle))

  def uuid(self) -> str:
    """The device UUID as 8-4-4-4-12 hex, the form ``str(torch.cuda.get_device_properties(
    i).uuid)`` gives and vLLM's IPC receiver looks itself up by."""
    uuid = _Uuid()
    self._check(self.lib.cuDeviceGetUuid(ctypes.byref(uuid), self.device), "cuDeviceGetUuid")
    h = bytes(uuid.bytes).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
