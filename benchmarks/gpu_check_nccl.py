"""``gpu_check.py --sections=nccl_local``: the trainer's half of an NCCL weight push on one GPU.

- which NCCL the push loads beside the trainer's JAX (path and ``ncclGetVersion``),
  and which ``libnccl`` files the process already maps (XLA's own);
- a 1-rank non-blocking communicator, opened and polled as a push polls it
  (``weight_transfer.deadline``), checked by an all-reduce of one float;
- a broadcast of a JAX buffer through it (1 rank: the bytes must come back unchanged);
- the staging of a full push of a SmolLM3-3B-size model (cast to bf16, Hugging Face
  layout, one packed buffer per 512 MiB bucket on the sending device): seconds per push,
  the part of a sync that needs no server.

Without a CUDA GPU (``--dry`` on a CPU) the NCCL parts print that NCCL is absent
and why, and count as skipped, not failed; the staging runs on the dry model.
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.rollout.weight_transfer import cuda, deadline, device, dlpack
from graft_jax.rollout.weight_transfer.nccl import Nccl, library_path
from graft_jax.rollout.weight_transfer.nccl_sender import BUCKET_BYTES
from graft_jax.rollout.weight_transfer.plan import vllm_packed_buckets

BROADCAST_BYTES = 256 << 20
DEADLINE_S = 60.0


def loaded_nccl_files() -> list[str]:
  """The ``libnccl`` files this process maps (Linux ``/proc/self/maps``)."""
  maps = pathlib.Path("/proc/self/maps")
  if not maps.exists():
    return []
  return sorted({line.split()[-1] for line in maps.read_text().splitlines()
                 if "libnccl" in line and "/" in line})


def _absent(out: dict, reason: str) -> None:
  out["nccl_local/nccl"] = {"skipped": reason}
  print(f"nccl_local: NCCL absent ({reason}); communicator and broadcast skipped")


def nccl_part(out: dict) -> None:
  """The library, a 1-rank communicator and a broadcast; skipped without a CUDA GPU."""
  if jax.default_backend() != "gpu":
    _absent(out, f"JAX backend is {jax.default_backend()}, NCCL needs a CUDA GPU")
    return
  try:
    path = library_path()
  except FileNotFoundError as e:
    _absent(out, str(e))
    return
  try:
    sender = jax.local_devices()[0]
    driver = cuda.Driver(sender.local_hardware_id)
    lib = Nccl(path)
    version = lib.version()
    out["nccl_local/library"] = {"path": path, "version": version,
                                 "mapped_before": loaded_nccl_files()}
    print(f"nccl_local: loads {path} (NCCL {version}); the process maps "
          f"{loaded_nccl_files() or 'no other libnccl'}")
    comm = lib.init_rank(lib.unique_id(), 1, 0)
    limit = deadline.Deadline(DEADLINE_S, "nccl_local")
    done = lambda: lib.ready(comm) and driver.idle()
    abort = lambda: lib.abort(comm)
    t0 = time.perf_counter()
    limit.wait(lambda: lib.ready(comm), step="a 1-rank communicator", abort=abort)
    opened = time.perf_counter() - t0
    one = jax.device_put(np.full(1, 3.5, np.float32), sender).block_until_ready()
    lib.all_reduce_f32(comm, dlpack.on_gpu(dlpack.buffer(one)).ptr, 1, driver.stream)
    limit.wait(done, step="the all-reduce", abort=abort)
    reduced = float(np.asarray(one)[0])
    data = np.random.default_rng(0).integers(0, 256, BROADCAST_BYTES, dtype=np.uint8)
    buf = jax.device_put(data, sender).block_until_ready()
    ptr = dlpack.on_gpu(dlpack.buffer(buf)).ptr
    times = []
    for _ in range(3):
      t0 = time.perf_counter()
      lib.broadcast_bytes(comm, ptr, BROADCAST_BYTES, driver.stream)
      limit.wait(done, step="the broadcast", abort=abort)
      times.append(time.perf_counter() - t0)
    same = bool(np.array_equal(np.asarray(buf), data))
    lib.abort(comm)
    seconds = sorted(times)[1]
    out["nccl_local/communicator"] = {"open_s": opened, "all_reduce_1rank": reduced,
                                      "broadcast_s": seconds, "broadcast_bytes": BROADCAST_BYTES,
                                      "broadcast_unchanged": same}
    # One rank sends to no one: this checks the plumbing (pointer, stream, polling), not
    # a link's bandwidth, which benchmarks/gpu_weight_sync.py measures with a server.
    print(f"nccl_local: 1-rank communicator opened in {opened:.3f} s (non-blocking, polled); "
          f"all-reduce of 3.5 -> {reduced}; broadcast of {BROADCAST_BYTES >> 20} MiB from a "
          f"JAX buffer {1e3 * seconds:.2f} ms, bytes unchanged: {same}")
    if reduced != 3.5 or not same:
      out["nccl_local/communicator"]["error"] = "a 1-rank collective changed its data"
  except Exception as e:  # pylint: disable=broad-except
    out["nccl_local/nccl"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    print(f"nccl_local: failed: {out['nccl_local/nccl']['error']}")


def staging_part(out: dict, cfg: ModelConfig) -> None:
  """Seconds to stage one full push (`Sender._stage`'s device work) of `cfg` in bf16."""
  try:
    model = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.float32)
    sender = jax.local_devices()[0]
    plan, sources = device.serving(model, "bfloat16")
    buckets = vllm_packed_buckets(plan, BUCKET_BYTES)

    def stage() -> int:
      return sum(int(a.block_until_ready().nbytes)
                 for a in device.packed_buckets(sources, buckets, sender))
    nbytes = stage()  # compiles the casts and the packing
    times = []
    for _ in range(3):
      t0 = time.perf_counter()
      stage()
      times.append(time.perf_counter() - t0)
    seconds = sorted(times)[1]
    out["nccl_local/staging"] = {"model": cfg.model_type, "bytes": nbytes,
                                 "buckets": len(buckets), "seconds": seconds}
    print(f"nccl_local: staging a {cfg.model_type} push ({nbytes / 2**20:,.1f} MiB bf16, "
          f"{len(buckets)} buckets): {seconds:.3f} s")
  except Exception as e:  # pylint: disable=broad-except
    out["nccl_local/staging"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    print(f"nccl_local: staging failed: {out['nccl_local/staging']['error']}")


def nccl_local_section(out: dict, *, dry: bool, dry_model: ModelConfig) -> None:
  nccl_part(out)
  staging_part(out, dry_model if dry else ModelConfig.smollm3_3b())
