"""Run by test_lowering with 4 fake CPU devices: the sharded programs of each pair's
models (`lowering.SHARDED_PROGRAMS`) lowered on the pair configs' mesh (FSDP over the
4 devices) for CUDA and a TPU. Prints JSON: per (model, program, platform) the kernels in it, the rows of
the first operand of each Triton call and the calls partitioned by a Python callback
(JAX's ``custom_partitioning``: cuDNN's attention), or the error that stopped the
lowering; and `per_device_gap`."""

import json
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

from graft_jax.config import load as config_load
from graft_jax.models.attention import pallas_segment_attention
from graft_jax.plan import lowering
from graft_jax.sharding import batch_shards, make_mesh
from graft_jax.train import methods

CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[2] / "configs").glob("pair_*.py"))
TRITON_ROWS = re.compile(r"custom_call @__gpu\$xla\.gpu\.triton\(.* : \(tensor<(\d+)x")


def per_device_gap(mesh) -> float:
  """The largest difference, relative to the largest value, between a loss of the Pallas
  GPU kernel's packed attention (Pallas's interpret mode) and its gradients under
  ``mesh`` (rows over its devices, each device's alone) and on one device."""
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(4, 128, 1, 2, 16)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(4, 128, 1, 16)), jnp.float32) for _ in range(2))
  seg = jnp.asarray(np.repeat([[1] * 50 + [2] * 60 + [0] * 18], 4, axis=0), jnp.int32)
  loss = lambda q, k, v: (pallas_segment_attention(q, k, v, seg, interpret=True) ** 2).sum()
  f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
  alone = f(q, k, v)
  with jax.set_mesh(mesh):
    shared = f(q, k, v)
  return max(float(jnp.abs(a - b).max() / jnp.abs(a).max())
             for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(shared)))


def main():
  out, seen = {"programs": {}}, set()
  for path in CONFIGS:
    cfg = methods.from_config_dict(config_load.load_config(str(path)))
    mesh = make_mesh(cfg.mesh, jax.devices())
    out["mesh"], out["shards"] = dict(mesh.shape), batch_shards(mesh)
    for name, mc in lowering.run_models(cfg).items():
      if name in seen:
        continue
      seen.add(name)
      for platform in sorted(lowering.PLATFORMS):
        for program in lowering.SHARDED_PROGRAMS:
          try:
            lowered = lowering.lower(cfg, program, mc, platform, mesh=mesh)
          except Exception as e:  # pylint: disable=broad-exception-caught
            result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
          else:
            text = lowering.program_text(lowered)
            result = {"kernels": sorted(lowering.kernel_calls(lowered)),
                      "triton_rows": [int(r) for r in TRITON_ROWS.findall(text)],
                      "partitioned": text.count("custom_call @CustomSPMDPartitioning")}
          out["programs"][f"{name} {program} {platform}"] = result
  out["per_device_gap"] = per_device_gap(mesh)
  print(json.dumps(out))


if __name__ == "__main__":
  main()
