"""One of two CPU processes checking ``graft_jax.distributed``'s helpers against plain NumPy.

  python -m tests.distributed.helpers_child PROCESS_ID PORT OUT_JSON

Each process has 2 CPU devices; the mesh (data 2 x fsdp 2) puts data across
the processes. Process 0 writes what it saw as JSON; process 1 checks the
same things and exits non-zero on a mismatch.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import jax
import numpy as np
from safetensors.numpy import load_file


@dataclasses.dataclass
class Stats:
  total: int = 0
  seconds: float = 0.0


def weights_written_alike(folder: pathlib.Path, mesh_cfg) -> bool:
  """The reload path's file from a model sharded over both processes (FSDP across them,
  gathered with process_allgather) is byte for byte the file of an unsharded copy."""
  from flax import nnx
  from graft_jax.models import ModelConfig, init_model
  from graft_jax.rollout import vllm_sync
  from graft_jax.sharding import make_mesh, shard_model
  cfg = ModelConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                    num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                    tie_word_embeddings=True, qk_norm=True)
  model = init_model(cfg, rngs=nnx.Rngs(0))  # the same weights in both processes
  vllm_sync.write_weights(model, folder / "local", "bfloat16")
  shard_model(model, make_mesh(mesh_cfg))
  embed = model.embedding_VxD
  assert not embed.get_value().is_fully_addressable and not embed.get_value().is_fully_replicated
  vllm_sync.write_weights(model, folder / "sharded", "bfloat16", bucket_bytes=1)
  # save_hf is collective: each process names its own folder, and only process 0's
  # may exist when it returns.
  from graft_jax import distributed
  from graft_jax.models import save_hf
  save_hf(model, cfg, None, folder / f"hf_{jax.process_index()}", dtype=jax.numpy.bfloat16)
  if not distributed.is_writer():
    return True  # process 1 wrote nothing; process 0 compares the files
  hf = load_file(folder / "hf_0" / "model.safetensors")
  served = load_file(folder / "local" / "model.safetensors")
  return ((folder / "local" / "model.safetensors").read_bytes()
          == (folder / "sharded" / "model.safetensors").read_bytes()
          and not (folder / "hf_1").exists()
          and all(np.array_equal(hf[k], served[k]) for k in hf) and len(hf) == len(served) - 1)


def pushed_alike(mesh_cfg) -> bool:
  """A GPU push's buckets from a tied model sharded over both processes: process 0 gets
  every served tensor once (the embedding once, no head), byte for byte the unsharded
  model's; process 1 takes part in the gathers and gets nothing to send."""
  import ml_dtypes
  from flax import nnx
  from graft_jax import distributed
  from graft_jax.models import ModelConfig, init_model
  from graft_jax.models.hf_io import hf_tensors
  from graft_jax.rollout.weight_transfer import device
  from graft_jax.rollout.weight_transfer.plan import vllm_packed_buckets
  from graft_jax.sharding import make_mesh, shard_model
  cfg = ModelConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                    num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                    tie_word_embeddings=True, qk_norm=True)
  model = init_model(cfg, rngs=nnx.Rngs(1))
  golden = {k: np.ascontiguousarray(v.astype(ml_dtypes.bfloat16)).tobytes()
            for k, v in hf_tensors(model).items()}
  shard_model(model, make_mesh(mesh_cfg))
  plan, sources = device.serving(model, "bfloat16")
  buckets = vllm_packed_buckets(plan, 4096)
  sender = distributed.is_writer()
  packed = list(device.packed_buckets(sources, buckets, jax.local_devices()[0], sender=sender))
  names = [t.name for t in plan]
  once = (len(set(names)) == len(names) == len(golden) and "lm_head.weight" not in names
          and [i for b in buckets for i in b] == list(range(len(plan))) and len(buckets) > 1)
  if not sender:
    return once and all(p is None for p in packed)
  return once and (b"".join(np.asarray(p).tobytes() for p in packed)
                   == b"".join(golden[n] for n in names))


def main(process_id: int, port: int, out: str) -> None:
  jax.config.update("jax_num_cpu_devices", 2)
  from graft_jax import distributed
  from graft_jax.sharding import MeshConfig, batch_sharding, make_mesh
  from graft_jax.config.run_config import DistributedConfig
  assert distributed.initialize(DistributedConfig(f"localhost:{port}", 2, process_id))
  seen = []

  def reward(texts, golds):
    seen.extend(texts)
    return [float(t == g) for t, g in zip(texts, golds)], Stats(len(texts), 0.5)

  texts = [str(i % 3) for i in range(7)]
  golds = ["1"] * 7
  rewards, stats = distributed.shared_reward(reward)(texts, golds)
  mesh = make_mesh(MeshConfig(2, 2, 1))
  host_MxRxT = np.arange(3 * 8 * 5, dtype=np.float32).reshape(3, 8, 5)
  placed = distributed.to_global(host_MxRxT, batch_sharding(mesh, ndim=3, row_dim=1))
  with jax.set_mesh(mesh):
    row_sums_MxR = jax.jit(lambda x: (x * x).sum(-1))(placed)
  report = {
      "process": jax.process_index(), "writer": distributed.is_writer(),
      "seen": seen, "rewards": np.asarray(rewards).tolist(),
      "stats": dataclasses.asdict(stats),
      "local_rows": sorted({s.index[1].start for s in placed.addressable_shards}),
      "fully_addressable": placed.is_fully_addressable,
      "back_equal": bool(np.array_equal(distributed.to_host(placed), host_MxRxT)),
      "row_sums_equal": bool(np.array_equal(distributed.to_host(row_sums_MxR),
                                            (host_MxRxT.astype(np.float64) ** 2).sum(-1))),
      "gathered": distributed.allgather_rows(np.full((distributed.share(5).stop
                                                      - distributed.share(5).start, 2),
                                                     process_id), 5).tolist(),
  }
  report["weights_equal"] = weights_written_alike(pathlib.Path(out).parent, MeshConfig(1, 4, 1))
  report["pushed_alike"] = pushed_alike(MeshConfig(1, 4, 1))
  assert report["pushed_alike"], "process 1: the push's gathers or plan differ"
  distributed.sync("helpers-done")
  if distributed.is_writer():
    with open(out, "w") as f:
      json.dump(report, f)


if __name__ == "__main__":
  main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
