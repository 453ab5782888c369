"""What a training step cost: device-seconds per phase and the update's FLOPs.

Methods differ in what they spend (GRPO n=32 samples four times the responses
of n=8; GRAFT scores peer responses; HACPO updates on twice the rows), so a
comparison at equal pass@1 needs the cost beside it. Per step, from the step's
own timings (``time/...``, `graft_jax.train.step`):

- ``cost/<model>/sample_device_s``: ``sample_s`` x the devices the model's
  sampler occupies: the trainer's for the JAX engine, its server's GPUs for
  vLLM (``vllm.gpus.*``, else ``vllm.tensor_parallel_size``; 1 on a CPU);
- ``cost/<model>/score_device_s``: (``reward_s`` + ``old_logp_s``) x the
  trainer's devices, which wait on the verifier and run the old log-probs;
- ``cost/<model>/update_device_s``: ``update_s`` x the trainer's devices;
- ``cost/exchange_device_s``: (``peers_s`` + ``exchange_s``) x the trainer's
  devices (peer rows re-tokenized and scored, HACPO's and SGT's rows built);
- ``cost/<model>/update_flops`` (`update_flops`) and the step's sums
  ``cost/device_s`` and ``cost/update_flops``; the device counts beside them.

The metrics writer adds the run's running totals (`graft_jax.outputs.cost_totals`).
Validation is not a training phase and is left out.
"""

from __future__ import annotations

import jax

from graft_jax.config import placement
from graft_jax.models.size import attn_width, matmul_params

PHASES = ("sample", "score", "update")


def update_flops(mc, tokens: float, tokens_sq: float) -> float:
  r"""Model FLOPs of the update's forward and backward passes over rows of lengths
  :math:`L_b` (prompt and response), ``tokens`` :math:`= \sum_b L_b` and
  ``tokens_sq`` :math:`= \sum_b L_b^2`:

  .. math::
      F = 3 \left( 2 P\, \sum_b L_b + 4\, n_{layers} n_{heads} d_{head} \sum_b L_b^2 \right)

  :math:`P` is `graft_jax.models.size.matmul_params`; :math:`2P` per token is the
  forward's matrix products, :math:`2 \cdot 2\, n_{heads} d_{head} L_b` per token and layer the
  scores :math:`QK^\top` and the weighted values (over all :math:`L_b` keys, as
  dense attention computes them), and the backward pass costs twice the forward.
  Norms, activations and the softmax are left out, and so is recomputation under
  ``remat`` (model FLOPs, not hardware FLOPs). The plan's ``train_flops_per_token``
  halves the attention term for causality; this counts every key, as the update's
  dense attention computes it."""
  attn = 4 * mc.num_layers * attn_width(mc)
  return 3.0 * (2.0 * matmul_params(mc) * tokens + attn * tokens_sq)


def trainer_devices() -> int:
  """Devices the trainer's programs run on (every process's)."""
  return jax.device_count()


def sampler_devices(cfg, policies: dict) -> dict[str, int]:
  """Per policy, the devices its sampler occupies: the trainer's for an in-process
  sampler; for a vLLM server its GPUs (the placement's, else its tensor-parallel
  size), or 1 on a CPU."""
  devices, tp = trainer_devices(), max(cfg.vllm.tensor_parallel_size, 1)
  on_gpus = cfg.engine == "vllm" and jax.default_backend() != "cpu"
  servers = ({name: len(gpus) or tp for _, name, gpus in placement.server_gpus(cfg)}
             if on_gpus else {})
  out = {}
  for name, p in policies.items():
    if not getattr(p.engine, "out_of_process", False):
      out[name] = devices
    else:
      out[name] = servers.get(name, tp) if on_gpus else 1
  return out


def step_cost(cfg, policies: dict, metrics: dict) -> dict:
  """The step's ``cost`` metrics (module docstring) from its ``metrics``: ``time`` and
  each updated model's ``update/seq_tokens`` and ``update/seq_tokens_sq_sum``."""
  time_s, devices = metrics["time"], trainer_devices()
  samplers = sampler_devices(cfg, policies)
  out: dict = {"trainer_devices": devices}
  for name, policy in policies.items():
    if f"{name}/sample_s" not in time_s:  # a model that does not train (replay's logs)
      continue
    seconds = {"sample": time_s[f"{name}/sample_s"],
               "score": time_s.get(f"{name}/reward_s", 0.0) + time_s.get(f"{name}/old_logp_s", 0.0),
               "update": time_s.get(f"{name}/update_s", 0.0)}
    per = {f"{p}_device_s": seconds[p] * (samplers[name] if p == "sample" else devices)
           for p in PHASES}
    upd = metrics.get(name, {}).get("update", {})
    per["update_flops"] = update_flops(policy.model.cfg, upd.get("seq_tokens", 0.0),
                                       upd.get("seq_tokens_sq_sum", 0.0))
    per["sampler_devices"] = samplers[name]
    out[name] = per
  out["exchange_device_s"] = (time_s.get("peers_s", 0.0) + time_s.get("exchange_s", 0.0)) * devices
  models = [v for v in out.values() if isinstance(v, dict)]
  out["device_s"] = out["exchange_device_s"] + sum(m[f"{p}_device_s"] for m in models
                                                   for p in PHASES)
  out["update_flops"] = sum(m["update_flops"] for m in models)
  return out
