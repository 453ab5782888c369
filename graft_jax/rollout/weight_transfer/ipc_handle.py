"""The pickled CUDA IPC handle vLLM's IPC receiver opens, written without torch.

vLLM's receiver calls ``torch.multiprocessing.reductions.rebuild_cuda_tensor(*args)``
on the tuple it finds under its GPU's UUID (after overwriting the device
index). The tuple names three torch objects (``torch.Tensor``,
``torch.storage.UntypedStorage``, ``torch.uint8``); pickle refers to them by
module and name, so we write those references as pickle opcodes (protocol 3)
instead of importing torch to let ``pickle.dumps`` find them. Everything else in
the tuple is ints, bytes and bools.

The buffer is one flat ``uint8`` tensor over our whole staging allocation.
``storage_handle`` is the raw 64-byte ``cudaIpcMemHandle_t``, the form torch's
allocator accepts from producers that predate its versioned handles. There is
no torch reference counter on our side: the staging buffer lives until the
sender closes, and the receiver clones each bucket before ``/update_weights``
returns, so ``ref_counter_handle`` names nothing (torch treats a counter it
cannot open on release as a producer already gone) and no event is synced
(we synchronize our copy before posting).
"""

from __future__ import annotations

import struct

NO_REF_COUNTER = b"graft_jax_weight_transfer_no_ref_counter"
_EVENT_BYTES = 64  # CUDA_IPC_HANDLE_SIZE; unused with event_sync_required=False


def _global(module: str, name: str) -> bytes:
  return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _int(v: int) -> bytes:
  if -2**31 <= v < 2**31:
    return b"J" + struct.pack("<i", v)
  raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
  return b"\x8a" + bytes([len(raw)]) + raw


def _bytes(v: bytes) -> bytes:
  return b"B" + struct.pack("<I", len(v)) + v


def _str(v: str) -> bytes:
  raw = v.encode()
  return b"X" + struct.pack("<I", len(raw)) + raw


def _tuple(items: list[bytes]) -> bytes:
  return b"(" + b"".join(items) + b"t"


def rebuild_args(handle: bytes, nbytes: int, ordinal: int) -> bytes:
  """The pickled argument tuple of ``rebuild_cuda_tensor`` for a flat uint8 buffer of
  `nbytes` at offset 0 of the allocation `handle` exports."""
  return _tuple([
      _global("torch", "Tensor"),            # tensor_cls
      _tuple([_int(nbytes)]),                # tensor_size
      _tuple([_int(1)]),                     # tensor_stride
      _int(0),                               # tensor_offset (elements, in the storage)
      _global("torch.storage", "UntypedStorage"),  # storage_cls
      _global("torch", "uint8"),             # dtype
      _int(ordinal),                         # storage_device (the receiver overwrites it)
      _bytes(handle),                        # storage_handle
      _int(nbytes),                          # storage_size_bytes
      _int(0),                               # storage_offset_bytes
      b"\x89",                               # requires_grad
      _bytes(NO_REF_COUNTER),                # ref_counter_handle
      _int(0),                               # ref_counter_offset
      _bytes(bytes(_EVENT_BYTES)),           # event_handle
      b"\x89",                               # event_sync_required
  ])


def pickled_handles(handles: dict[str, bytes]) -> bytes:
  """``pickle.dumps({gpu uuid: rebuild args})``, from `handles` already made by
  `rebuild_args`."""
  items = b"".join(_str(uuid) + args for uuid, args in handles.items())
  return b"\x80\x03}(" + items + b"u."
