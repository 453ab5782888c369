"""NCCL through ctypes: a unique id, one communicator, broadcast and all-reduce.

The trainer holds no torch, so no ``torch.distributed`` or vLLM ``PyNcclCommunicator``.
The library is ``libnccl.so.2`` from the ``nvidia-nccl-cu12`` wheel that
``jax[cuda12]`` installs (``nvidia/nccl/lib``), or the file `path` names; it
should be the same NCCL version the server's vLLM environment loads, since
NCCL peers of different versions may refuse to connect.
"""

from __future__ import annotations

import ctypes
import importlib.util
import pathlib

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES
UINT8, FLOAT32 = 1, 7  # ncclDataType_t
SUM = 0  # ncclRedOp_t


class _UniqueId(ctypes.Structure):
  _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


def library_path(path: str = "") -> str:
  """`path` if given, else the ``nvidia-nccl-cu12`` wheel's ``libnccl.so.2``."""
  if path:
    return path
  spec = importlib.util.find_spec("nvidia.nccl")
  for root in (spec.submodule_search_locations or []) if spec else []:
    lib = pathlib.Path(root) / "lib" / "libnccl.so.2"
    if lib.exists():
      return str(lib)
  raise FileNotFoundError("vllm.weight_sync='nccl' needs libnccl.so.2: install jax[cuda12] "
                          "(it brings nvidia-nccl-cu12) or pass the library's path")


class Nccl:
  """One NCCL library; the communicator calls take the caller's CUDA stream."""

  def __init__(self, path: str = ""):
    self.path = library_path(path)
    self.lib = ctypes.CDLL(self.path)
    self.lib.ncclGetErrorString.restype = ctypes.c_char_p
    self.lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                          _UniqueId, ctypes.c_int]
    collective = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    self.lib.ncclAllReduce.argtypes = collective  # ..., op, comm, stream
    self.lib.ncclBroadcast.argtypes = collective  # ..., root, comm, stream
    self.lib.ncclCommAbort.argtypes = [ctypes.c_void_p]

  def _check(self, status: int, call: str) -> None:
    if status:
      raise RuntimeError(f"NCCL {call} failed: {self.lib.ncclGetErrorString(status).decode()}")

  def unique_id(self) -> bytes:
    uid = _UniqueId()
    self._check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return bytes(bytearray(uid))

  def init_rank(self, unique_id: bytes, world_size: int, rank: int) -> ctypes.c_void_p:
    """Blocks until all `world_size` ranks have joined with the same id."""
    comm = ctypes.c_void_p()
    uid = _UniqueId.from_buffer_copy(unique_id)
    self._check(self.lib.ncclCommInitRank(ctypes.byref(comm), world_size, uid, rank),
                "ncclCommInitRank")
    return comm

  def all_reduce_f32(self, comm, ptr: int, count: int, stream) -> None:
    self._check(self.lib.ncclAllReduce(ptr, ptr, count, FLOAT32, SUM, comm, stream),
                "ncclAllReduce")

  def broadcast_bytes(self, comm, ptr: int, nbytes: int, stream, root: int = 0) -> None:
    self._check(self.lib.ncclBroadcast(ptr, ptr, nbytes, UINT8, root, comm, stream),
                "ncclBroadcast")

  def abort(self, comm) -> None:
    """Frees the communicator without waiting on peers (destroy would wait on a server that
    keeps its side open until it exits)."""
    self._check(self.lib.ncclCommAbort(comm), "ncclCommAbort")
