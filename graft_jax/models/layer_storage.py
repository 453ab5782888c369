"""Block parameters stored per layer, or stacked on a leading layer axis for the scan.

Per layer (the default): ``Decoder.layers[i]`` is block i, and its parameters
are Hugging Face's ``model.layers.{i}.*``.

Stacked (``Decoder.set_memory_options(scan_layers=True)``): with p the scan
period (``layer_stack.scan_period``: 1 for Qwen3 and Llama, 4 for SmolLM3's
NoPE pattern), ``Decoder.stacks[j]`` is one block whose every parameter has a
leading axis of length L / p, and entry k of it is layer

    i = k p + j.

The scan then runs over parameters that are already stacked, so the compiled
update holds one set of operations per weight kind, not per layer: its
gradient, fp32 accumulator, clipping norm and optimizer update do not grow
with depth, and neither does its compile time. A stacked parameter's logical
axes gain a leading ``"layers"`` name (replicated by the sharding rules).

``per_layer_params`` lists either storage as per-layer paths, which is all the
Hugging Face table (``hf_keys``) and the vLLM weight sync ever see, so users'
checkpoints are the same in both.
"""

from __future__ import annotations

from typing import Iterator

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

LAYER_AXIS = "layers"


def _placed(fn, value, spec_of):
  """``fn(value)``; for concrete arrays laid out on a mesh, jitted with the output
  sharding ``spec_of(input spec)`` so no device ever holds a whole stacked weight."""
  first = value[0] if isinstance(value, (list, tuple)) else value
  if isinstance(first, jax.core.Tracer) or not isinstance(
      getattr(first, "sharding", None), NamedSharding):
    return fn(value)
  sharding = first.sharding
  out = NamedSharding(sharding.mesh, PartitionSpec(*spec_of(tuple(sharding.spec),
                                                            first.ndim)))
  return jax.jit(fn, out_shardings=out)(value)


def _pad_spec(spec: tuple, ndim: int) -> tuple:
  return spec + (None,) * (ndim - len(spec))


def stack_blocks(blocks, period: int) -> nnx.List:
  """``[stack_j for j < period]``: block j of every period stacked over periods."""
  blocks = list(blocks)
  if period < 1 or len(blocks) % period:
    raise ValueError(f"period {period} does not divide {len(blocks)} layers")
  out = []
  for j in range(period):
    group = [nnx.split(b) for b in blocks[j::period]]
    graphdef = group[0][0]

    def stack_var(*variables):
      values = [v.get_value() for v in variables]
      stacked = _placed(jnp.stack, values, lambda spec, nd: (None, *_pad_spec(spec, nd)))
      meta = variables[0].get_metadata()
      if "logical_axes" in meta:
        return variables[0].replace(stacked, logical_axes=(LAYER_AXIS, *meta["logical_axes"]))
      return variables[0].replace(stacked)

    state = jax.tree.map(stack_var, *[s for _, s in group], is_leaf=_is_var)
    out.append(nnx.merge(graphdef, state))
  return nnx.List(out)


def unstack_blocks(stacks) -> nnx.List:
  """The inverse of `stack_blocks`: blocks in layer order, parameters per layer."""
  stacks = list(stacks)
  period = len(stacks)
  per_stack = [list(_split_stack(s)) for s in stacks]
  depth = period * len(per_stack[0])
  return nnx.List([per_stack[i % period][i // period] for i in range(depth)])


def _split_stack(stack) -> Iterator[nnx.Module]:
  graphdef, state = nnx.split(stack)
  n = jax.tree.leaves(state)[0].shape[0]
  for k in range(n):
    def take(v, k=k):
      value = _placed(lambda a: a[k], v.get_value(), lambda spec, nd: _pad_spec(spec, nd)[1:])
      meta = v.get_metadata()
      if meta.get("logical_axes", (None,))[0] == LAYER_AXIS:
        return v.replace(value, logical_axes=tuple(meta["logical_axes"][1:]))
      return v.replace(value)
    yield nnx.merge(graphdef, jax.tree.map(take, state, is_leaf=_is_var))


def layer_block(stacks, i: int):
  """Block i of stacked storage, its parameters sliced out of the stacks (inside a
  trace the slices are free views of the program's inputs)."""
  period = len(stacks)
  graphdef, state = nnx.split(stacks[i % period])
  k = i // period
  return nnx.merge(graphdef, jax.tree.map(lambda v: v.replace(v.get_value()[k]), state,
                                          is_leaf=_is_var))


def per_layer_params(model, kind=nnx.Param) -> Iterator[tuple[str, jax.Array]]:
  """``(path, value)`` of every parameter, with the paths and in the order of per-layer
  storage (``layers.{i}.attn.q_DxNxH``, layer by layer), whichever storage the model uses."""
  entries = []
  for path, variable in nnx.to_flat_state(nnx.state(model, kind)):
    value = variable.get_value()
    if path[0] != "stacks":
      entries.append((tuple(path), value))
      continue
    period, j = len(model.stacks), int(path[1])
    entries += [(("layers", k * period + j, *path[2:]), value[k]) for k in range(value.shape[0])]
  # Flat NNX states are ordered by path (names, and layer numbers as numbers).
  for path, value in sorted(entries, key=lambda e: e[0]):
    yield ".".join(str(p) for p in path), value


def _is_var(x) -> bool:
  return isinstance(x, nnx.Variable)
