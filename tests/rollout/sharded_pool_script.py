"""Run by test_sharded_pool with 8 fake CPU devices: the slot pool with its slots split
over a mesh's batch axes against the same pool on one device; prints JSON."""

import json

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import SamplingParams
from graft_jax.rollout.continuous import ContinuousSamplerEngine
from graft_jax.rollout.slot_pool import run_pool
from graft_jax.sharding import MeshConfig, make_mesh, shard_model

# (data, fsdp, tensor): slots split 4 ways; 2 ways beside a tensor axis that splits the
# weights; 3 ways.
MESHES = {"data2_fsdp2": (2, 2, 1), "fsdp2_tensor2": (1, 2, 2), "data3": (3, 1, 1)}
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 30)), [7] * 9, [12, 13, 14]]
OTHER = [[9] * 20, [4, 5], [6] * 3, [8] * 31, [3] * 7]  # other lengths, the same bucket
N, SLOTS = 3, 12
# Many EOS ids: the random model's responses end at different lengths.
EOS = tuple(range(2, 40))
PARAMS = {"t1": SamplingParams(max_new_tokens=20, temperature=1.0, seed=5),
          "topp": SamplingParams(max_new_tokens=20, temperature=0.7, top_k=50, top_p=0.9,
                                 seed=7)}


def sample(engine, params, prompts=PROMPTS):
  b = engine.generate(prompts, N, params)
  m = engine.last_metrics
  return {"tokens": b.tokens_BxL.tolist(), "logp": b.logp_BxL.tolist(),
          "lengths": b.lengths_B.tolist(), "steps": m["decode_steps"],
          "occupancy": m["slot_occupancy"]}


def main():
  cfg = ModelConfig(model_type="qwen3", vocab_size=256, hidden_size=32, intermediate_size=64,
                    num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16)
  model = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.float32)
  pool = lambda shrinks, mesh=None: ContinuousSamplerEngine(
      model, eos_ids=EOS, pad_id=0, slots=SLOTS, max_prompt_len=32, shrinks=shrinks, mesh=mesh)
  want = {label: sample(pool(0), params) for label, params in PARAMS.items()}
  want["other"] = sample(pool(0), PARAMS["t1"], OTHER)
  want["shrunk"] = sample(pool(2), PARAMS["t1"])
  out = {"want": want}
  for name, shape in MESHES.items():
    mesh = make_mesh(MeshConfig(*shape), jax.devices()[:int(np.prod(shape))])
    placed = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.float32)
    shard_model(placed, mesh)  # the weights as the trainer holds them
    engine = ContinuousSamplerEngine(placed, eos_ids=EOS, pad_id=0, slots=SLOTS,
                                     max_prompt_len=32, shrinks=0, mesh=mesh)
    res = {"row_shards": engine.row_shards}
    before = run_pool._cache_size()  # pylint: disable=protected-access
    res["got"] = {label: sample(engine, params) for label, params in PARAMS.items()}
    res["got"]["other"] = sample(engine, PARAMS["t1"], OTHER)
    engine.set_weights(placed)
    res["got"]["again"] = sample(engine, PARAMS["t1"])
    # Two sampling flag sets; other prompt lengths and new weights compile nothing.
    res["programs"] = run_pool._cache_size() - before  # pylint: disable=protected-access
    res["got"]["shrunk"] = sample(ContinuousSamplerEngine(
        placed, eos_ids=EOS, pad_id=0, slots=SLOTS, max_prompt_len=32, shrinks=2, mesh=mesh),
                                  PARAMS["t1"])
    # Each device refills once 2 of its slots are free: another schedule, the same tokens.
    res["got"]["batched"] = sample(ContinuousSamplerEngine(
        placed, eos_ids=EOS, pad_id=0, slots=SLOTS, max_prompt_len=32, shrinks=0, mesh=mesh,
        refill_at=2), PARAMS["t1"])
    out[name] = res
  print(json.dumps(out))


if __name__ == "__main__":
  main()
