"""Run by test_sharded_sampler with 8 fake CPU devices: the JAX sampler with its prompts
split over a mesh's batch axes against the same sampler on one device; prints JSON."""

import json

import jax
import numpy as np
from flax import nnx

from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.rollout.kv_budget import kv_bytes_per_prompt
from graft_jax.rollout.sampler import generate_padded
from graft_jax.sharding import MeshConfig, make_mesh, shard_model
from tests.train import tiny_pair

# (data, fsdp, tensor): rows split 4 ways; 2 ways with the tensor axis; 3 ways (not a
# power of two: the prompt bucket grows to a multiple of 3).
MESHES = {"data2_fsdp2": (2, 2, 1), "fsdp2_tensor2": (1, 2, 2), "data3": (3, 1, 1)}
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 30)), [7] * 9, [12, 13, 14], [4, 20]]
N, NEW = 3, 12


def _multiple(size, k):
  return -(-size // k) * k


def sample(engine, temperature):
  b = engine.generate(PROMPTS, N, SamplingParams(max_new_tokens=NEW, temperature=temperature,
                                                 seed=5))
  return {"tokens": b.tokens_BxL.tolist(), "logp": b.logp_BxL.tolist()}


def main():
  out = {}
  for name, shape in MESHES.items():
    model = tiny_pair.make_models()["b"][0]  # smollm3-like: 4 layers, 2 KV heads, a NoPE layer
    plain = JaxSamplerEngine(model, eos_ids=[-1], pad_id=0)
    want = {t: sample(plain, t) for t in (0.0, 1.0)}
    mesh = make_mesh(MeshConfig(*shape), jax.devices()[:int(np.prod(shape))])
    shardings = shard_model(model, mesh)
    # Prompts padded to 32 tokens, 16 new: a budget of one prompt's cache per device
    # decodes each call in several chunks.
    one_prompt = kv_bytes_per_prompt(model.cfg, n=N, slots=32 + 16, itemsize=4)
    got_engines = {
        "whole": JaxSamplerEngine(model, eos_ids=[-1], pad_id=0, state_sharding=shardings,
                                  mesh=mesh),
        "chunked": JaxSamplerEngine(model, eos_ids=[-1], pad_id=0, state_sharding=shardings,
                                    mesh=mesh, max_kv_bytes=one_prompt),
    }
    res = {"want": want, "row_shards": got_engines["whole"].row_shards,
           # The CPU decode kernel has no rule for splitting rows: a sharded sampler
           # keeps XLA's decode attention, and the caller's model is left as it was.
           "decode_attention": {"sharded": nnx.merge(got_engines["whole"].graphdef,
                                                     got_engines["whole"].state).decode_attention,
                                "model": model.decode_attention}}
    for label, engine in got_engines.items():
      res[label] = {t: sample(engine, t) for t in (0.0, 1.0)}
    # The compiled sampler's rows really are split: each device holds rows / shards.
    engine = got_engines["whole"]
    ids = np.ones((_multiple(8, engine.row_shards), 16), np.int32)
    o = generate_padded(engine.graphdef, engine.state, *map(engine._rows, (
        ids, np.ones_like(ids, bool), np.ones(len(ids), bool))),
        jax.random.key(0), np.int32(4), np.float32(1.0), np.float32(1.0), np.int32(0),
        n=N, max_new=16, eos_ids=(-1,), pad_id=0, greedy=False, top_k=0, use_top_p=False,
        total_rows=len(ids) * N)
    res["shard_rows"] = o.tokens_BxN.sharding.shard_shape(o.tokens_BxN.shape)[0]
    res["rows"] = o.tokens_BxN.shape[0]
    out[name] = res
  print(json.dumps(out))


if __name__ == "__main__":
  main()
