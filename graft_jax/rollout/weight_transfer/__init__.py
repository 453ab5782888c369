"""GPU weight sync to a vLLM server through vLLM's weight-transfer API (NCCL or CUDA IPC).

The server runs with ``--weight-transfer-config '{"backend": "nccl"|"ipc"}'``; the
trainer drives ``/init_weight_transfer_engine``, ``/start_weight_update``,
``/update_weights`` and ``/finish_weight_update`` over HTTP and moves the bytes
itself, from JAX device buffers, without torch or vLLM in this process.
Modules: ``plan`` (which tensors, in which order and buckets), ``protocol``
(request bodies and the HTTP client), ``device`` (on-device cast, packing,
DLPack pointers), ``nccl`` / ``cuda`` (ctypes bindings), ``ipc_handle``,
``base`` (what both senders share), ``deadline`` (every wait of a push under
one time limit), ``nccl_sender``, ``ipc_sender``, and
``make_sender`` below, the one entry point (``VLLMEngine`` calls it).
"""

from __future__ import annotations

from graft_jax.rollout.weight_transfer.deadline import SyncAborted

BACKENDS = ("nccl", "ipc")


def server_args(backend: str) -> tuple[str, ...]:
  """The ``vllm serve`` flags that open the server's side of `backend`."""
  if backend not in BACKENDS:
    raise ValueError(f"vllm.weight_sync={backend!r} has no weight-transfer backend; "
                     f"expected one of {BACKENDS}")
  return ("--weight-transfer-config", '{"backend": "%s"}' % backend)


def server_env(backend: str, *, tcp: bool = False) -> tuple[tuple[str, str], ...]:
  """Server environment the backend needs: IPC handles arrive pickled over HTTP, which
  vLLM refuses unless told to accept them. Both processes are ours, on one node, and
  the server's Unix socket sits in a folder only this user can open; on TCP
  (``tcp``), where anyone who reaches the port could send a pickle, it is refused."""
  if backend != "ipc":
    return ()
  if tcp:
    raise ValueError("vllm.weight_sync='ipc' unpickles what the server receives: it needs "
                     "the private Unix socket (vllm.host=''), not TCP")
  return (("VLLM_ALLOW_INSECURE_SERIALIZATION", "1"),)


def make_sender(backend: str, sidecar, **kwargs):
  """A sender for `backend` talking to `sidecar` (anything with ``post(path, body, *,
  timeout)``); its ``send(model)`` pushes the model's serving weights. Imports the
  backend's bindings only here, so CPU runs never load CUDA or NCCL."""
  if backend == "nccl":
    from graft_jax.rollout.weight_transfer.nccl_sender import NcclSender
    return NcclSender(sidecar, **kwargs)
  if backend == "ipc":
    from graft_jax.rollout.weight_transfer.ipc_sender import IpcSender
    return IpcSender(sidecar, **kwargs)
  server_args(backend)  # raises the one-line error
  raise AssertionError(backend)
