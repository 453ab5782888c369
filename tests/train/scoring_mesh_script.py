"""Run by test_scoring_mesh with 4 fake CPU devices: scores ragged rows with a tiny
model on one device and FSDP-sharded over 4, and prints JSON with both results, the
compiled scorer's input shardings and the rows per chunk."""

import json

import jax
import numpy as np
from flax import nnx

from graft_jax.models import token_logprobs_jit
from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.models import logprobs
from graft_jax.sharding import MeshConfig, make_mesh, shard_model
from graft_jax.train import row_logprobs

CFG = ModelConfig(model_type="qwen3", vocab_size=97, hidden_size=32, intermediate_size=48,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def rows(seed=0, n=11):
  rng = np.random.default_rng(seed)
  prompts = [rng.integers(3, 97, rng.integers(1, 9)).tolist() for _ in range(n)]
  responses = [rng.integers(3, 97, rng.integers(0, 40)).tolist() for _ in range(n)]
  return prompts, responses


def main():
  prompts, responses = rows()
  single = init_model(CFG, rngs=nnx.Rngs(3))
  want = row_logprobs.score_rows(single, prompts, responses, 0, token_budget=128)
  sharded = init_model(CFG, rngs=nnx.Rngs(3))
  shard_model(sharded, make_mesh(MeshConfig(1, 4, 1), jax.devices()[:4]))
  calls = []
  real = logprobs.token_logprobs_jit

  def counting(model, ids_BxT, mask_BxT, **kw):
    calls.append(list(ids_BxT.shape))
    return real(model, ids_BxT, mask_BxT, **kw)

  row_logprobs.token_logprobs_jit = counting
  got = row_logprobs.score_rows(sharded, prompts, responses, 0, token_budget=128)
  ids = np.zeros(tuple(calls[0]), np.int32)
  graphdef, state = nnx.split(sharded)
  sharding = logprobs.row_sharding(sharded)
  compiled = logprobs._token_logprobs_split.lower(
      graphdef, state, logprobs._place(ids, sharding), logprobs._place(ids > 0, sharding),
      np.float32(1.0)).compile()
  args = compiled.input_shardings[0]  # (state, ids, mask, temperature)
  in_specs = [str(args[1].spec), str(args[2].spec)]
  whole = np.asarray(token_logprobs_jit(sharded, ids, ids >= 0))
  # One row (a probe) cannot be split over 4 devices: it goes whole, same values.
  one_ids = np.asarray(rows(seed=1, n=1)[0][0] * 4, np.int32)[None]
  one = np.asarray(token_logprobs_jit(sharded, one_ids, one_ids > 0))
  one_want = np.asarray(token_logprobs_jit(single, one_ids, one_ids > 0))
  print(json.dumps({"want": [w.tolist() for w in want], "got": [g.tolist() for g in got],
                    "calls": calls, "in_specs": in_specs, "shards": logprobs.row_shards(sharded),
                    "whole_shape": list(whole.shape), "one": one.tolist(),
                    "one_want": one_want.tolist()}))


if __name__ == "__main__":
  main()
