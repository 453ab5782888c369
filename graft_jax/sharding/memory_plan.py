"""A per-device memory plan of one policy's update, read from the compiled program.

Nothing is guessed: the update that training runs
(``graft_jax.train.microbatch.accumulated_update``) is lowered with abstract
parameters (``nnx.eval_shape``, no weights) and the run's shardings, compiled
for the mesh, and ``compiled.memory_analysis()`` gives its argument, output
and temporary bytes per device. Fixed state is counted from the shardings.
The numbers are those of the backend that compiles (here XLA's CPU backend)
for the attention the config picks: 'dense' materialises one layer's T x T
scores, 'blocked' one block of them (``graft_jax.models.attention``).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from graft_jax.models.decoder import Decoder
from graft_jax.sharding.place import batch_shards, batch_sharding, state_shardings
from graft_jax.train.rows import ROW_FIELDS, TOKEN_FIELDS



@dataclasses.dataclass(frozen=True)
class UpdateMemory:
  """Bytes per device of one compiled update."""
  params: int
  opt_state: int
  grads: int  # the fp32 accumulator, sharded like the params
  temporaries: int  # XLA's temp buffers (activations, grads in flight)
  arguments: int
  outputs: int
  aliased: int  # donated params + optimizer state written in place

  @property
  def total(self) -> int:
    return self.arguments + self.outputs - self.aliased + self.temporaries


def sharded_bytes(abstract, shardings) -> int:
  """Bytes of the largest per-device shard set of an abstract tree under its shardings."""
  total = 0
  for leaf, sh in zip(jax.tree.leaves(abstract), jax.tree.leaves(shardings)):
    shard = sh.shard_shape(leaf.shape)
    total += int(np.prod(shard)) * jnp.dtype(leaf.dtype).itemsize
  return total


def abstract_model(model_cfg, *, param_dtype, dtype, remat: str, scan_layers: bool,
                   attention: str = "dense", attention_block: int = 512):
  def build():
    m = Decoder(model_cfg, rngs=nnx.Rngs(0), param_dtype=param_dtype, dtype=dtype)
    m.set_memory_options(remat=remat, scan_layers=scan_layers, attention=attention,
                         attention_block=attention_block)
    return m
  return nnx.split(nnx.eval_shape(build))


def micro_batch_shapes(num_micro: int, rows: int, length: int) -> dict:
  out = {k: jax.ShapeDtypeStruct((num_micro, rows, length), d) for k, d in TOKEN_FIELDS.items()}
  out.update({k: jax.ShapeDtypeStruct((num_micro, rows), d) for k, d in ROW_FIELDS.items()})
  out.update({k: jax.ShapeDtypeStruct((num_micro,), jnp.float32)
              for k in ("share", "num_tokens", "num_sgt_tokens", "num_rows")})
  return out


def lower_update(model_cfg, mesh, tx, spec, *, rows_per_device: int, length: int,
                 minibatch_rows: int, param_dtype=jnp.float32, dtype=jnp.bfloat16,
                 remat: str = "full", scan_layers: bool = True, attention: str = "dense",
                 attention_block: int = 512):
  """The accumulated update for micro-batches of ``rows_per_device`` rows of ``length``
  tokens per device (a minibatch of ``minibatch_rows``), lowered for ``mesh`` with
  abstract parameters. Returns ``(lowered, (params, param_shardings), (opt, opt_shardings))``."""
  from graft_jax.train.microbatch import accumulated_update  # train imports sharding
  graphdef, params = abstract_model(model_cfg, param_dtype=param_dtype, dtype=dtype,
                                    remat=remat, scan_layers=scan_layers, attention=attention,
                                    attention_block=attention_block)
  param_sh = state_shardings(params, mesh)
  opt = jax.eval_shape(tx.init, params)
  opt_sh = state_shardings(opt, mesh)
  rows = rows_per_device * batch_shards(mesh)
  micro = micro_batch_shapes(-(-minibatch_rows // rows), rows, length)
  micro_sh = {k: batch_sharding(mesh, ndim=len(v.shape), row_dim=1) for k, v in micro.items()}
  replicated = NamedSharding(mesh, PartitionSpec())
  fn = functools.partial(accumulated_update, graphdef=graphdef, tx=tx, spec=spec,
                         grad_sharding=param_sh)
  jitted = jax.jit(fn, donate_argnums=(0, 1), in_shardings=(param_sh, opt_sh, micro_sh, None),
                   out_shardings=(param_sh, opt_sh, replicated))
  with jax.set_mesh(mesh):
    lowered = jitted.lower(params, opt, micro, jax.ShapeDtypeStruct((), jnp.int32))
  return lowered, (params, param_sh), (opt, opt_sh)


def update_memory(model_cfg, mesh, tx, spec, **kw) -> UpdateMemory:
  """Compiles ``lower_update(model_cfg, mesh, tx, spec, **kw)`` and reads its memory."""
  lowered, (params, param_sh), (opt, opt_sh) = lower_update(model_cfg, mesh, tx, spec, **kw)
  with jax.set_mesh(mesh):
    compiled = lowered.compile()
  ma = compiled.memory_analysis()
  p_bytes = sharded_bytes(params, param_sh)
  grads = sum(int(np.prod(sh.shard_shape(x.shape))) * 4
              for x, sh in zip(jax.tree.leaves(params), jax.tree.leaves(param_sh)))
  return UpdateMemory(params=p_bytes, opt_state=sharded_bytes(opt, opt_sh), grads=grads,
                      temporaries=int(ma.temp_size_in_bytes),
                      arguments=int(ma.argument_size_in_bytes),
                      outputs=int(ma.output_size_in_bytes), aliased=int(ma.alias_size_in_bytes))


def largest_rows(one: UpdateMemory, two: UpdateMemory, available: int) -> int:
  """Rows per device that fit ``available`` bytes, extrapolating temporaries linearly
  from the compiles at one and two rows (0: not even one row fits)."""
  per_row = max(two.total - one.total, 1)
  if one.total > available:
    return 0
  return 1 + (available - one.total) // per_row
