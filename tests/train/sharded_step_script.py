"""Run by test_sharded_step in a subprocess with 8 fake CPU devices: one GRAFT step, sharded vs not."""

import json
import pathlib
import sys

import jax
import numpy as np

from graft_jax.sharding import MeshConfig, make_mesh
from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg


def run(workdir, mesh):
  # AdamW divides each gradient entry by its own RMS + eps; with the default
  # eps=1e-8 an entry whose gradient is ~1e-8 turns float32 reduction-order
  # rounding into an update of order lr. eps=1e-6 bounds that amplification,
  # so the parameters can be compared at 1e-6.
  cfg = make_cfg("graft", workdir, **{"logging.peer_log": False, "checkpoint.resume": False,
                                      "optimizer.eps": 1e-6})
  t = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(), reward_fn=tiny_pair.contains_reward,
              mesh=mesh)
  metrics = t.run_step()
  params = {n: [np.asarray(x) for x in jax.tree.leaves(p.params)] for n, p in t.policies.items()}
  shardings = {n: sorted({str(getattr(x.sharding, "spec", "single")) for x in jax.tree.leaves(p.params)})
               for n, p in t.policies.items()}
  t.close()
  return metrics, params, shardings


def main(out_dir):
  out_dir = pathlib.Path(out_dir)
  assert len(jax.devices()) == 8, jax.devices()
  m0, p0, _ = run(out_dir / "single", None)
  m1, p1, specs = run(out_dir / "sharded", make_mesh(MeshConfig(data=2, fsdp=2, tensor=2)))
  diffs = {n: max(float(np.abs(a - b).max()) for a, b in zip(p0[n], p1[n])) for n in p0}
  keys = ["m"] + [f"{n}/{k}" for n in p0 for k in ("reward_mean",)]
  flat = lambda m: {"m": m.get("m"), **{f"{n}/reward_mean": m[n]["reward_mean"] for n in p0},
                    **{f"{n}/loss": m[n]["update"]["loss"] for n in p0},
                    **{f"{n}/grafted": m[n]["exchange"].get("grafted_groups") for n in p0}}
  print(json.dumps({"param_max_abs_diff": diffs, "single": flat(m0), "sharded": flat(m1),
                    "specs": specs}))


if __name__ == "__main__":
  main(sys.argv[1])
