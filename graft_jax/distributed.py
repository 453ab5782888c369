"""Multi-process runs on JAX's distributed runtime: start-up, who writes, and host data in and out.

One process per host (SLURM task, MPI rank, Kubernetes pod) runs the same
program; ``jax.distributed.initialize`` connects them and the mesh from
``cfg.mesh`` then spans every process's devices. What this module decides:

* start-up from ``cfg.distributed`` (an explicit coordinator) or, with
  ``auto``, from the cluster's environment as ``jax.distributed`` detects it;
* process 0 alone writes the run's shared files (``is_writer``);
* a host array enters the mesh as ``jax.make_array_from_process_local_data``
  with this process's rows only (``to_global``), and leaves it through
  ``process_allgather`` when other processes hold shards (``to_host``), never
  ``jax.device_get`` of a non-addressable array;
* each process verifies its own contiguous share of a step's responses and
  the rewards are gathered (``shared_reward``), so every process holds the
  same rewards and takes the same exchange decision.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import jax
import numpy as np

log = logging.getLogger(__name__)

# What jax.distributed's cluster detection reads (SLURM, Open MPI, Kubernetes, ...).
CLUSTER_ENV = ("SLURM_JOB_ID", "OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_SIZE",
               "KUBERNETES_SERVICE_HOST", "JAX_COORDINATOR_ADDRESS")


def initialize(dist) -> bool:
  """Connects this process to the others; returns whether the run is multi-process.

  ``dist`` is a ``DistributedConfig``: with ``coordinator_address`` set, its
  ``num_processes`` and ``process_id`` are passed as given; with ``auto``,
  ``jax.distributed.initialize()`` reads them from the cluster's environment.
  Neither: a single process, nothing to connect. Must run before the first
  use of a JAX device; a second call is a no-op.
  """
  if jax.distributed.is_initialized():
    return jax.process_count() > 1
  if dist.coordinator_address:
    jax.distributed.initialize(dist.coordinator_address, num_processes=dist.num_processes,
                               process_id=dist.process_id)
  elif dist.auto:
    log.info("starting from the cluster's environment: %s", cluster_env() or "no known variable")
    jax.distributed.initialize()
  else:
    return False
  log.info("process %d of %d, %d local / %d global devices", jax.process_index(),
           jax.process_count(), jax.local_device_count(), jax.device_count())
  return jax.process_count() > 1


def is_writer() -> bool:
  """Whether this process writes the run's shared files (metrics, TensorBoard, peer logs,
  config, the progress bar): process 0. Safe before start-up (it touches no device)."""
  return not jax.distributed.is_initialized() or jax.process_index() == 0


def multi_process() -> bool:
  return jax.distributed.is_initialized() and jax.process_count() > 1


def sync(name: str) -> None:
  """Waits until every process reaches ``name`` (no-op in a single process)."""
  if multi_process():
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


def from_writer(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Process 0's ``arrays`` on every process (each passes arrays of the same shapes and
  dtypes; only process 0's values count). Unchanged in a single process."""
  if not multi_process():
    return arrays
  from jax.experimental import multihost_utils
  # Sent as integers or floats (booleans as uint8), then restored to each dtype.
  sent = {k: np.asarray(v).astype(np.uint8) if np.asarray(v).dtype == bool else np.asarray(v)
          for k, v in arrays.items()}
  got = multihost_utils.broadcast_one_to_all(sent)
  return {k: np.asarray(got[k]).astype(np.asarray(arrays[k]).dtype) for k in arrays}


def share(num: int, index: int | None = None, count: int | None = None) -> slice:
  """This process's contiguous share of ``num`` items; shares differ in size by at most one."""
  index = jax.process_index() if index is None else index
  count = jax.process_count() if count is None else count
  base, extra = divmod(num, count)
  start = index * base + min(index, extra)
  return slice(start, start + base + (index < extra))


def allgather_rows(local: np.ndarray, num: int) -> np.ndarray:
  """Every process's ``share(num)`` of rows (``local``), concatenated in process order."""
  if not multi_process():
    return np.asarray(local)
  from jax.experimental import multihost_utils
  count = jax.process_count()
  width = -(-num // count)  # process_allgather needs equal shapes: pad every share to it
  local = np.asarray(local)
  padded = np.zeros((width,) + local.shape[1:], local.dtype)
  padded[:len(local)] = local
  got = np.asarray(multihost_utils.process_allgather(padded))
  return np.concatenate([got[p, :share(num, p, count).stop - share(num, p, count).start]
                         for p in range(count)])


def shared_reward(reward_fn):
  """``reward_fn`` run on this process's share of the responses, rewards gathered.

  Every process passes the same ``(texts, golds)``; each verifies
  ``share(len(texts))`` and all receive all rewards, so verifier time splits
  over the hosts and the exchange decision (a function of the rewards) is
  the same everywhere. Dataclass statistics are summed over processes.
  """
  if not multi_process():
    return reward_fn

  def score(texts, golds):
    mine = share(len(texts))
    rewards, stats = reward_fn(list(texts)[mine], list(golds)[mine])
    rewards = allgather_rows(np.asarray(rewards, np.float32), len(texts))
    return rewards, _sum_stats(stats)
  return score


def _sum_stats(stats):
  if stats is None or not dataclasses.is_dataclass(stats):
    return stats
  from jax.experimental import multihost_utils
  fields = dataclasses.fields(stats)
  local = np.array([float(getattr(stats, f.name)) for f in fields], np.float64)
  total = np.asarray(multihost_utils.process_allgather(local)).sum(axis=0)
  return type(stats)(**{f.name: type(getattr(stats, f.name))(v) for f, v in zip(fields, total)})


def to_global(host: np.ndarray, sharding) -> jax.Array:
  """A host array (the same on every process) placed on ``sharding``: each process hands
  ``jax.make_array_from_process_local_data`` only the block its devices hold."""
  host = np.asarray(host)
  if sharding.is_fully_addressable:
    return jax.device_put(host, sharding)
  index = list(sharding.addressable_devices_indices_map(host.shape).values())
  hull = tuple(slice(min(i[d].start or 0 for i in index),
                     max(size if i[d].stop is None else i[d].stop for i in index))
               for d, size in enumerate(host.shape))
  return jax.make_array_from_process_local_data(sharding, host[hull], host.shape)


def to_host(x) -> np.ndarray:
  """The whole value of a jax array on this host: directly when this process holds all of
  it (addressable or replicated), else gathered with ``process_allgather``."""
  if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
    return np.asarray(x)
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def cluster_env() -> dict[str, str]:
  """The cluster variables present (for the start-up log and error messages)."""
  return {k: os.environ[k] for k in CLUSTER_ENV if k in os.environ}
