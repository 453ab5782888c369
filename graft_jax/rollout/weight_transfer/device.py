"""The trainer's half of a push on the device: serving dtype and layout, one byte buffer
per bucket, gathered onto the one device that sends.

Each parameter is cast and laid out by ``vllm_sync.to_serving`` on the device
that holds it, moved device-to-device onto the sending device, and a bucket
is concatenated into one ``uint8`` array there (the byte layout vLLM's packed
receivers split by size). Nothing passes through host memory while the mesh
lives in one process. Under a mesh spread over processes, a parameter other
processes hold part of is gathered with ``process_allgather``
(``graft_jax.distributed.to_host``), which every process must call in the same
order: all of them iterate the buckets, and only the sender gets arrays back.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp

from graft_jax import distributed
from graft_jax.rollout import vllm_sync
from graft_jax.rollout.weight_transfer.plan import WireTensor, wire_plan


def serving(model, dtype: str, *, head_copy: bool = False) -> tuple[list[WireTensor], list[tuple]]:
  """The push's plan and, per entry, ``(layout, parameter, served dtype)``.

  A tied embedding is listed once. `head_copy` also lists it as the head, for a server
  that serves it untied (``vllm_sync.write_weights`` writes tied models that way):
  its bytes then cross twice, but it is still one tensor on the trainer.
  """
  rows = vllm_sync.serving_plan(model, dtype)
  if head_copy and model.cfg.tie_word_embeddings:
    head, embedding = vllm_sync.TIED_HEAD
    rows = rows + [(head,) + next(r for r in rows if r[0] == embedding)[1:]]
  plan = wire_plan((key, shape, dt) for key, _, _, shape, dt in rows)
  return plan, [(layout, value, dt) for _, layout, value, _, dt in rows]


@jax.jit
def pack(arrays) -> jax.Array:
  """The arrays' bytes, each in C order, one after another (little-endian, like
  ``torch.Tensor.view(torch.uint8)`` on the receiver)."""
  return jnp.concatenate([jax.lax.bitcast_convert_type(a, jnp.uint8).reshape(-1)
                          if a.dtype.itemsize > 1 else a.view(jnp.uint8).reshape(-1)
                          for a in arrays])


def _on(x: jax.Array, device, sender: bool):
  # A SingleDeviceSharding, not the bare device: device_put(x, device) keeps an
  # explicit-axes mesh type on x, and the packing would then be a sharded program.
  one = jax.sharding.SingleDeviceSharding(device)
  if x.is_fully_addressable:
    return jax.device_put(x, one) if sender else None
  host = distributed.to_host(x)  # a collective: every process calls it
  return jax.device_put(host, one) if sender else None


def packed_buckets(sources: list[tuple], buckets: list[list[int]], device, *,
                   sender: bool = True) -> Iterator[jax.Array | None]:
  """One packed ``uint8`` array on `device` per bucket (None on processes that do not
  send). The next bucket's casts and copies are dispatched before the current one is
  handed over, so they overlap its transfer."""
  def launch(bucket):
    parts = [_on(vllm_sync.to_serving(value, layout=layout, dtype=dt), device, sender)
             for layout, value, dt in (sources[i] for i in bucket)]
    return pack(parts) if sender else None
  current = launch(buckets[0]) if buckets else None
  for i in range(len(buckets)):
    following = launch(buckets[i + 1]) if i + 1 < len(buckets) else None
    yield current
    current = following
