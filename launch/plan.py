"""Per-device memory plan of a run config's update (a pair or K models), compiled on fake devices.

  .venv/bin/python launch/plan.py --config=configs/pair_smollm3_qwen3.py --devices=4 \
      --device-memory-gb=141 [--config.micro_batch_tokens=...]

No weights are needed: parameters are abstract (nnx.eval_shape). The update is
compiled by XLA's CPU backend for `--devices` fake devices and its
memory_analysis() read per device (graft_jax.sharding.memory_plan), against the
trainer's share of a device (`xla_mem_fraction`, else JAX's default 0.75). With
`engine=vllm` it also prints each server's share, weights and KV-cache budget.
"""

import os
import sys

if __name__ == "__main__":
  devices = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--devices=")), "4")
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + f" --xla_force_host_platform_device_count={int(devices)}")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "a run config file (a pair or `models`)")
_DEVICES = flags.DEFINE_integer("devices", 4, "devices of the mesh (fake CPU devices here)")
_MEMORY = flags.DEFINE_float("device-memory-gb", 141.0, "memory of one device, GB (H200: 141)")
_RESERVE = flags.DEFINE_float("reserve-fraction", 0.0,
                              "share of each device kept for other processes (vLLM sidecars)")


def main(_):
  import jax
  from graft_jax.sharding import run_plan
  from graft_jax.train import config as config_lib

  cfg = config_lib.from_config_dict(_CONFIG.value)
  mesh, available, table = run_plan.plan(cfg, jax.devices()[:_DEVICES.value],
                                          int(_MEMORY.value * 1e9),
                                          reserve_fraction=_RESERVE.value)
  print(run_plan.format_plan(mesh, available, table, cfg.max_prompt_len + cfg.max_response_len))
  servers = run_plan.server_budgets(cfg, int(_MEMORY.value * 1e9))
  if servers:
    print(run_plan.format_servers(servers))
  return 0 if all(r["fits"] for r in table + servers) else 1


if __name__ == "__main__":
  app.run(main)
