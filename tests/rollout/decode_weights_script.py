"""Run by test_decode_weights with 4 fake CPU devices: the JAX sampler on an FSDP mesh
(fsdp=4) against the same sampler on one device, and the all-gathers in the compiled
decode loops' bodies, from the weights the sampler decodes from and, for contrast,
from the trainer's FSDP-sharded fp32 master weights as they are; prints JSON."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.rollout.sampler import generate_padded
from graft_jax.sharding import MeshConfig, make_mesh, shard_model

# Every weight's model dimension (64) splits over fsdp=4.
CFG = ModelConfig(model_type="qwen3", vocab_size=96, hidden_size=64, intermediate_size=128,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32, qk_norm=True)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], list(range(3, 30)), [7] * 9]
N, NEW = 2, 20


def sample(engine, temperature):
  b = engine.generate(PROMPTS, N, SamplingParams(max_new_tokens=NEW, temperature=temperature,
                                                 seed=3))
  return {"tokens": b.tokens_BxL.tolist(), "logp": b.logp_BxL.tolist()}


def _computations(hlo: str) -> dict[str, str]:
  """Each computation's text by name, from compiled HLO text."""
  comps, name, lines = {}, None, []
  for line in hlo.splitlines():
    head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{$", line)
    if head:
      name, lines = head.group(1), []
    elif line == "}" and name is not None:
      comps[name] = "\n".join(lines)
      name = None
    elif name is not None:
      lines.append(line)
  return comps


def loop_body_collectives(hlo: str) -> dict[str, list[str]]:
  """By kind (all-gather, all-reduce, ...), the result shapes of the collectives in
  every while loop's body and in what the body calls (fusions, nested loops)."""
  comps = _computations(hlo)
  called = lambda text: re.findall(
      r"(?:body|condition|calls|to_apply|branch_computations)=\{?%?([\w.\-]+)", text)
  todo = [b for text in comps.values() for b in re.findall(r"body=%?([\w.\-]+)", text)]
  seen = set()
  while todo:
    name = todo.pop()
    if name in seen or name not in comps:
      continue
    seen.add(name)
    todo += called(comps[name])
  found = {}
  for name in seen:
    for shape, kind in re.findall(
        r"= (\w+\[[\d,]*\])(?:\{[^}]*\})? (all-gather|all-reduce|reduce-scatter|all-to-all|"
        r"collective-permute)(?:-start)?\(", comps[name]):
      found.setdefault(kind, []).append(shape)
  return found


def main():
  model = init_model(CFG, rngs=nnx.Rngs(4))
  param_shapes = sorted({tuple(x.shape) for x in jax.tree.leaves(nnx.state(model))
                         if x.ndim >= 2})
  want = {t: sample(JaxSamplerEngine(model, eos_ids=[-1], pad_id=0), t) for t in (0.0, 1.0)}
  mesh = make_mesh(MeshConfig(1, 4, 1), jax.devices()[:4])
  shardings = shard_model(model, mesh)
  engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=0, state_sharding=shardings, mesh=mesh)
  got = {t: sample(engine, t) for t in (0.0, 1.0)}

  ids = np.ones((4, 16), np.int32)
  rows = [engine._rows(x) for x in (ids, np.ones_like(ids, bool), np.ones(4, bool))]

  def gathers(state):
    compiled = generate_padded.lower(
        engine.graphdef, state, *rows, jax.random.key(0), np.int32(NEW), np.float32(1.0),
        np.float32(1.0), np.int32(0), n=N, max_new=32, eos_ids=(-1,), pad_id=0,
        greedy=False, top_k=0, use_top_p=False, total_rows=4 * N).compile()
    text = compiled.as_text()
    return {"while_loops": text.count(" while("), "body": loop_body_collectives(text)}

  decoding = engine.decoding_state()
  print(json.dumps({
      "want": want, "got": got, "param_shapes": param_shapes,
      "master": {"dtype": str(jax.tree.leaves(engine.state)[0].dtype),
                 "spec": str(engine.state["layers"][0]["mlp"]["up_DxF"].sharding.spec),
                 **gathers(engine.state)},
      "decoding": {"dtype": str(jax.tree.leaves(decoding)[0].dtype),
                   "spec": str(decoding["layers"][0]["mlp"]["up_DxF"].sharding.spec),
                   **gathers(decoding)},
      "bf16": str(jax.tree.leaves(JaxSamplerEngine(
          init_model(CFG, rngs=nnx.Rngs(4), param_dtype=jnp.float32, dtype=jnp.bfloat16),
          eos_ids=[-1], pad_id=0).decoding_state())[0].dtype),
  }))


if __name__ == "__main__":
  main()
