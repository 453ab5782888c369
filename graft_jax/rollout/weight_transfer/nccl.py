"""NCCL through ctypes: a unique id, one non-blocking communicator, broadcast and all-reduce.

The trainer holds no torch, so no ``torch.distributed`` or vLLM ``PyNcclCommunicator``.
The library is ``libnccl.so.2`` from the ``nvidia-nccl-cu12`` wheel that
``jax[cuda12]`` installs (``nvidia/nccl/lib``), or the file `path` names; it
should be the same NCCL version the server's vLLM environment loads, since
NCCL peers of different versions may refuse to connect.

The communicator is non-blocking (``ncclConfig_t.blocking = 0``): its creation
and its collectives return at once (``ncclInProgress``), and the caller polls
``async_error`` and the stream under a deadline (`graft_jax.rollout.weight_transfer
.deadline`), so a peer that never comes cannot hang the trainer; ``abort`` then
ends whatever is still in flight.
"""

from __future__ import annotations

import ctypes
import importlib.util
import pathlib

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES
UINT8, FLOAT32 = 1, 7  # ncclDataType_t
SUM = 0  # ncclRedOp_t
SUCCESS, IN_PROGRESS = 0, 7  # ncclResult_t
API_MAGIC = 0xcafebeef  # NCCL_API_MAGIC
CONFIG_UNDEF_INT = -2 ** 31  # NCCL_CONFIG_UNDEF_INT (INT_MIN): "let NCCL choose"
CONFIG_VERSION = 21700  # NCCL_VERSION(2, 17, 0): the layout of `_Config` below


class _UniqueId(ctypes.Structure):
  _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class _Config(ctypes.Structure):
  """``ncclConfig_t`` as NCCL 2.17 lays it out. Later versions only append fields and read
  as many bytes as ``size`` says, defaulting the rest."""
  _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
              ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int),
              ("minCTAs", ctypes.c_int), ("maxCTAs", ctypes.c_int),
              ("netName", ctypes.c_char_p), ("splitShare", ctypes.c_int)]


def nonblocking_config() -> _Config:
  """``NCCL_CONFIG_INITIALIZER`` with ``blocking = 0``."""
  undef = CONFIG_UNDEF_INT
  return _Config(ctypes.sizeof(_Config), API_MAGIC, CONFIG_VERSION, 0, undef, undef, undef,
                 None, undef)


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
    self.lib.ncclCommInitRankConfig.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                                _UniqueId, ctypes.c_int,
                                                ctypes.POINTER(_Config)]
    self.lib.ncclCommGetAsyncError.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    collective = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    self.lib.ncclAllReduce.argtypes = collective  # ..., op, comm, stream
    self.lib.ncclBroadcast.argtypes = collective  # ..., root, comm, stream
    self.lib.ncclCommAbort.argtypes = [ctypes.c_void_p]

  def _check(self, status: int, call: str) -> None:
    """Raises on an NCCL error; ``ncclInProgress`` is no error on a non-blocking
    communicator (`async_error` says when the call is done)."""
    if status not in (SUCCESS, IN_PROGRESS):
      raise RuntimeError(f"NCCL {call} failed: {self.lib.ncclGetErrorString(status).decode()}")

  def unique_id(self) -> bytes:
    uid = _UniqueId()
    self._check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return bytes(bytearray(uid))

  def version(self) -> int:
    """``ncclGetVersion``: e.g. 22703 for 2.27.3."""
    code = ctypes.c_int()
    self._check(self.lib.ncclGetVersion(ctypes.byref(code)), "ncclGetVersion")
    return code.value

  def init_rank(self, unique_id: bytes, world_size: int, rank: int) -> ctypes.c_void_p:
    """Starts joining the group and returns at once: the communicator is usable when
    `ready` says so, which happens once all `world_size` ranks joined with the same id."""
    comm = ctypes.c_void_p()
    uid = _UniqueId.from_buffer_copy(unique_id)
    config = nonblocking_config()
    self._check(self.lib.ncclCommInitRankConfig(ctypes.byref(comm), world_size, uid, rank,
                                                ctypes.byref(config)),
                "ncclCommInitRankConfig")
    return comm

  def async_error(self, comm) -> int:
    """``ncclCommGetAsyncError``: ``IN_PROGRESS`` while the communicator's last call runs."""
    state = ctypes.c_int()
    self._check(self.lib.ncclCommGetAsyncError(comm, ctypes.byref(state)),
                "ncclCommGetAsyncError")
    return state.value

  def ready(self, comm) -> bool:
    """Whether the communicator's pending call has completed; raises if it failed."""
    state = self.async_error(comm)
    if state == IN_PROGRESS:
      return False
    self._check(state, "the communicator")
    return True

  def all_reduce_f32(self, comm, ptr: int, count: int, stream) -> None:
    self._check(self.lib.ncclAllReduce(ptr, ptr, count, FLOAT32, SUM, comm, stream),
                "ncclAllReduce")

  def broadcast_bytes(self, comm, ptr: int, nbytes: int, stream, root: int = 0) -> None:
    self._check(self.lib.ncclBroadcast(ptr, ptr, nbytes, UINT8, root, comm, stream),
                "ncclBroadcast")

  def abort(self, comm) -> None:
    """Frees the communicator without waiting on peers (destroy would wait on a server that
    keeps its side open until it exits), ending any call still in flight."""
    self._check(self.lib.ncclCommAbort(comm), "ncclCommAbort")
