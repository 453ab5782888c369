"""Run by test_sharded_graft_step with 8 fake CPU devices: one GRAFT step unsharded and on
two meshes; prints JSON with parameter differences and every leaf's sharding spec."""

import json
import sys

import jax
import numpy as np
from jax.sharding import PartitionSpec

from graft_jax.sharding import MeshConfig, make_mesh
from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

# (data, fsdp, tensor, perf.micro_batch_tokens): the second mesh also splits each
# minibatch into micro-batches of one 64-token row per device.
MESHES = {"data2_fsdp4": (2, 4, 1, 0), "fsdp2_tensor2": (1, 2, 2, 64)}


def specs(tree):
  return [str(leaf.sharding.spec) if hasattr(leaf.sharding, "spec") else "single"
          for leaf in jax.tree.leaves(tree)]


def run(workdir, mesh_spec):
  mesh, extra = None, {}
  if mesh_spec is not None:
    data, fsdp, tensor, budget = mesh_spec
    devices = jax.devices()[:data * fsdp * tensor]
    mesh = make_mesh(MeshConfig(data, fsdp, tensor), devices)
    extra["perf.micro_batch_tokens"] = budget
  # AdamW divides each gradient entry by its RMS + eps: eps=1e-6 keeps float32
  # reduction-order noise on ~1e-8 gradients from becoming lr-sized updates.
  # No balancing: every candidate group is grafted, so the step has grafted rows
  # (with balancing this seed's first step has m = 0).
  cfg = make_cfg("graft", workdir, **{"logging.peer_log": False, "checkpoint.resume": False,
                                      "optimizer.eps": 1e-6, "graft.balance": False}, **extra)
  t = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(),
              reward_fn=tiny_pair.contains_reward, mesh=mesh)
  out = {"init": {n: {"params": specs(p.params), "opt": specs(p.opt_state)}
                  for n, p in t.policies.items()}}
  metrics = t.run_step()
  out["after"] = {n: {"params": specs(p.params), "opt": specs(p.opt_state)}
                  for n, p in t.policies.items()}
  if mesh is not None:
    # What the logical rules ask for, leaf by leaf (graft_jax.sharding.state_shardings).
    from graft_jax.sharding import state_shardings
    out["intended"] = {
        n: {"params": [str(s.spec) for s in jax.tree.leaves(state_shardings(p.params, mesh))],
            "opt": [str(s.spec) for s in jax.tree.leaves(state_shardings(p.opt_state, mesh))]}
        for n, p in t.policies.items()}
    pa = t.policies[cfg.model_a.name]
    out["q_proj_spec"] = str(pa.params["layers"][0]["attn"]["q_DxNxH"].sharding.spec)
    out["devices"] = {n: sorted({len(x.sharding.device_set) for x in jax.tree.leaves(p.params)})
                      for n, p in t.policies.items()}
  out["params"] = {n: [np.asarray(x) for x in jax.tree.leaves(p.params)]
                   for n, p in t.policies.items()}
  out["loss"] = {n: metrics[n]["update"]["loss"] for n in t.policies}
  out["m"] = metrics.get("m")
  out["grafted"] = {n: metrics[n]["exchange"].get("grafted_groups") for n in t.policies}
  t.close()
  return out


def main(out_dir):
  assert len(jax.devices()) == 8, jax.devices()
  base = run(f"{out_dir}/single", None)
  report = {"m": base["m"], "loss": base["loss"], "grafted": base["grafted"], "meshes": {}}
  for name, spec in MESHES.items():
    got = run(f"{out_dir}/{name}", spec)
    diff = {n: max(float(np.abs(a - b).max()) for a, b in zip(base["params"][n], got["params"][n]))
            for n in base["params"]}
    report["meshes"][name] = {k: v for k, v in got.items() if k != "params"} | {"param_diff": diff}
    print(name, "param max|diff|", diff, "loss", got["loss"], "vs", base["loss"], file=sys.stderr)
  print(json.dumps(report))


if __name__ == "__main__":
  main(sys.argv[1])
