"""Run by test_pool_sampler under 4 fake CPU devices: a two-step GRAFT run whose JAX engine
is the slot pool, on one device and with its slots split over a data x fsdp mesh."""

import json
import pathlib
import sys
import tempfile

import numpy as np

from graft_jax.outputs import peer_log
from graft_jax.sharding import MeshConfig, make_mesh
from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg


def run(workdir, mesh):
  cfg = make_cfg("graft", workdir, **{"rollout.sampler": "pool", "rollout.pool_slots": 8,
                                      "perf.decode_attention": "xla", "checkpoint.resume": False})
  t = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(), reward_fn=tiny_pair.contains_reward,
              mesh=mesh)
  t.run(2)
  engines = {n: {"type": type(p.engine).__name__, "row_shards": p.engine.row_shards}
             for n, p in t.policies.items()}
  t.close()
  steps = {}
  for name in engines:
    reader = peer_log.PeerLogReader(pathlib.Path(workdir) / "peer_logs", name)
    for step in range(2):
      rows = reader.load_step(step).to_pylist()
      steps[f"{name}/{step}"] = {
          "rows": [[r["prompt_id"], r["sample_index"], list(r["response_ids"])] for r in rows],
          "logp": [float(x) for r in rows for x in r["logprobs"]]}
  return engines, steps


def main():
  root = pathlib.Path(tempfile.mkdtemp())
  single = run(root / "single", None)
  sharded = run(root / "sharded", make_mesh(MeshConfig(data=2, fsdp=2, tensor=1)))
  print(json.dumps({"single": single, "sharded": sharded}))


if __name__ == "__main__":
  main(*sys.argv[1:])
