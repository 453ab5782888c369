"""The device address of a JAX buffer, read from its DLPack capsule (no copy, no torch).

NCCL and the CUDA driver take raw device pointers; DLPack is the framework-neutral
way to get one, and it also says where the buffer lives (so a push refuses a
host buffer instead of handing NCCL a CPU address) and whether it is compact.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math

CPU, CUDA = 1, 2  # DLDeviceType: kDLCPU, kDLCUDA


class _Device(ctypes.Structure):
  _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
  _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):  # DLTensor (dlpack.h), first member of DLManagedTensor
  _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
              ("dtype", _DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
              ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclasses.dataclass(frozen=True)
class Buffer:
  """A device buffer's address and size; `keep` holds the array and capsule alive, so the
  address stays valid as long as this object does."""

  ptr: int
  nbytes: int
  device_type: int
  device_id: int
  keep: tuple = dataclasses.field(repr=False, compare=False)


def buffer(x) -> Buffer:
  """`x`'s address via DLPack; `x` must be compact (row-major, no gaps), as NCCL and
  ``cuMemcpy`` read ``nbytes`` straight from the address."""
  # The unversioned capsule ("dltensor"): DLTensor sits at offset 0 of what it holds.
  capsule = x.__dlpack__()
  t = ctypes.cast(_api.PyCapsule_GetPointer(capsule, b"dltensor"), ctypes.POINTER(_Tensor))[0]
  shape = [t.shape[i] for i in range(t.ndim)]
  if t.strides:
    expected, stride = [], 1
    for size in reversed(shape):
      expected.append(stride)
      stride *= size
    strides = [t.strides[i] for i in range(t.ndim)]
    if any(s != e for s, e, n in zip(strides, reversed(expected), shape) if n > 1):
      raise ValueError(f"buffer of shape {shape} has strides {strides}: not compact")
  nbytes = math.prod(shape) * t.dtype.bits * t.dtype.lanes // 8
  return Buffer(int(t.data or 0) + int(t.byte_offset), nbytes, t.device.device_type,
                t.device.device_id, keep=(x, capsule))


def on_gpu(buf: Buffer) -> Buffer:
  """`buf`, after checking it is CUDA memory (NCCL and the IPC copy read device addresses)."""
  if buf.device_type != CUDA:
    raise RuntimeError(f"vllm.weight_sync needs the trainer on a CUDA GPU; the buffer to "
                       f"send is on DLPack device type {buf.device_type}, not CUDA")
  return buf
