"""A per-device memory plan of one policy's update, read from the compiled programs.

Nothing is guessed: the two programs training runs (the micro-batch gradient
loop, over packed rows where the run packs them, ``perf.packed_update``, and the
optimizer step, ``graft_jax.train.update.update_program``) are
lowered with abstract parameters (``nnx.eval_shape``, no weights) and the run's
shardings, compiled for the mesh, and ``compiled.memory_analysis()`` gives
their argument, output and temporary bytes per device. The peak is the larger
of the gradient program with the optimizer state resident beside it, and the
optimizer step.

The programs are traced for the target backend (`graft_jax.backends.traced_for`),
so no CPU-only code is in them, and compiled by the backend at hand (fake CPU
devices when planning a GPU run on a laptop). Attention is the one part a CPU
cannot compile as a GPU runs it: cuDNN's kernel is planned as 'blocked', the
other flash-style path with no T x T scores (on an H200 at 8,192 tokens one
layer's cuDNN scratch and 'blocked''s are within a few hundred MiB:
BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from graft_jax import backends
from graft_jax.models.attention import resolve_impl
from graft_jax.models.decoder import Decoder
from graft_jax.train import packed_micro_batches
from graft_jax.sharding.place import batch_shards, batch_sharding, state_shardings


@dataclasses.dataclass(frozen=True)
class UpdateMemory:
  """Bytes per device of one update (both programs)."""
  params: int
  opt_state: int
  grads: int  # the fp32 accumulator, sharded like the params
  temporaries: int  # the gradient program's temp buffers (activations, grads in flight)
  grad_program: int  # arguments + outputs - donated + temps of the gradient program
  apply_program: int  # the same for the optimizer step

  @property
  def total(self) -> int:
    """The update's peak: the gradient program with the optimizer state beside it, or
    the optimizer step, whichever is larger."""
    return max(self.grad_program + self.opt_state, self.apply_program)


def sharded_bytes(abstract, shardings) -> int:
  """Bytes of the largest per-device shard set of an abstract tree under its shardings."""
  total = 0
  for leaf, sh in zip(jax.tree.leaves(abstract), jax.tree.leaves(shardings)):
    shard = sh.shard_shape(leaf.shape)
    total += int(np.prod(shard)) * jnp.dtype(leaf.dtype).itemsize
  return total


def planned_attention(attention: str, platform: str, *, dtype, head_dim: int, length: int,
                      block: int) -> str:
  """The implementation the plan compiles for ``attention`` on ``platform``: the
  target's choice, with 'blocked' standing in for kernels only their backend compiles."""
  impl = resolve_impl(attention, dtype=dtype, head_dim=head_dim, length=length, block=block,
                      backend=platform)
  return "blocked" if impl in ("cudnn", "splash") and jax.default_backend() != platform else impl


def abstract_model(model_cfg, *, param_dtype, dtype, remat: str, scan_layers: bool,
                   attention: str = "dense", attention_block: int = 512):
  def build():
    m = Decoder(model_cfg, rngs=nnx.Rngs(0), param_dtype=param_dtype, dtype=dtype)
    m.set_memory_options(remat=remat, scan_layers=scan_layers, attention=attention,
                         attention_block=attention_block)
    return m
  return nnx.split(nnx.eval_shape(build))


def placed(tree, shardings):
  """Abstract arrays of ``tree`` placed by ``shardings`` (a tree of its structure)."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def program_bytes(compiled) -> int:
  """What a compiled program needs at once: arguments, outputs and temporaries, donated
  arguments counted once (XLA's memory analysis)."""
  m = compiled.memory_analysis()
  return int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
             + m.temp_size_in_bytes)


def packed_grad_args(grad_args, *, rows: int, length: int, slots: int):
  """The gradient program's arguments for packed micro-batches of ``rows`` rows of
  ``length`` (`packed_micro_batches.stack`): `update_program`'s ``grad_args`` over the
  row view (``rows * SEQS_PER_ROW`` rows) with the packing beside the batch."""
  p, acc, (batch, fresh), scalars, count, index = grad_args
  spec = lambda *shape: jax.ShapeDtypeStruct((slots, *shape), jnp.int32)
  view = rows * packed_micro_batches.SEQS_PER_ROW
  packing = packed_micro_batches.Packing(ids=spec(rows, length), segment_ids=spec(rows, length),
                                         row=spec(view), start=spec(view))
  return p, acc, (batch, fresh, packing), scalars, count, index


def sharded_update_program(graphdef, params, tx, loss, mesh, *, rows: int, length: int,
                           slots: int, packed: bool = False):
  """The update's gradient and optimizer-step programs on ``mesh`` for micro-batches of
  ``rows`` rows (over all devices) of ``length``, ``slots`` of them stacked, packed or
  not, with abstract arguments placed as the run places them (parameters and moments
  by their shardings, rows over the batch axes): ``((grads, grad_args), (apply,
  apply_args))``, for ``.lower(*args)`` under ``jax.set_mesh(mesh)``."""
  from graft_jax.train.update import update_program  # pylint: disable=import-outside-toplevel
  param_sh = state_shardings(params, mesh)
  opt_sh = state_shardings(jax.eval_shape(tx.init, params), mesh)
  view = rows * packed_micro_batches.SEQS_PER_ROW if packed else rows  # the loss's rows
  (grads_fn, grad_args), (apply_fn, apply_args) = update_program(
      graphdef, params, tx, loss, rows=view, length=length, slots=slots, mesh=mesh,
      param_sharding=param_sh, opt_sharding=opt_sh)
  if packed:
    grad_args = packed_grad_args(grad_args, rows=rows, length=length, slots=slots)
  replicated = NamedSharding(mesh, PartitionSpec())
  p, acc, stack, scalars, count, index = grad_args
  stack = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      x.shape, x.dtype, sharding=batch_sharding(mesh, ndim=len(x.shape), row_dim=1)), stack)
  grad_args = (placed(p, param_sh), placed(acc, param_sh), stack,
               jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                            scalars),
               jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated),
               jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated))
  apply_args = (placed(apply_args[0], param_sh), placed(apply_args[1], opt_sh),
                placed(apply_args[2], param_sh))
  return (grads_fn, grad_args), (apply_fn, apply_args)


def update_memory(model_cfg, mesh, tx, loss, *, rows_per_device: int, length: int,
                  minibatch_rows: int, param_dtype=jnp.float32, dtype=jnp.bfloat16,
                  remat: str = "full", scan_layers: bool = True, attention: str = "auto",
                  attention_block: int = 512, platform: str | None = None,
                  packed: bool = False) -> UpdateMemory:
  """Compiles the update's programs for micro-batches of ``rows_per_device`` rows of
  ``length`` tokens per device (all of a minibatch of ``minibatch_rows`` stacked, as
  the update passes them) on ``mesh``, traced for ``platform`` (default: the backend
  at hand), and reads their memory per device. ``packed``: the rows are packed
  sequences (``perf.packed_update``), the program the run then compiles."""
  platform = platform or jax.default_backend()
  attention = planned_attention(attention, platform, dtype=dtype, head_dim=model_cfg.head_dim,
                                length=length, block=attention_block)
  with backends.traced_for(platform):
    graphdef, params = abstract_model(model_cfg, param_dtype=param_dtype, dtype=dtype,
                                      remat=remat, scan_layers=scan_layers, attention=attention,
                                      attention_block=attention_block)
    rows = rows_per_device * batch_shards(mesh)
    (grads_fn, grad_args), (apply_fn, apply_args) = sharded_update_program(
        graphdef, params, tx, loss, mesh, rows=rows, length=length,
        slots=-(-minibatch_rows // rows), packed=packed)
    with jax.set_mesh(mesh):
      grad_c = grads_fn.lower(*grad_args).compile()
      apply_c = apply_fn.lower(*apply_args).compile()
  param_sh, opt = state_shardings(params, mesh), jax.eval_shape(tx.init, params)
  grads = sum(int(np.prod(sh.shard_shape(x.shape))) * 4
              for x, sh in zip(jax.tree.leaves(params), jax.tree.leaves(param_sh)))
  return UpdateMemory(params=sharded_bytes(params, param_sh),
                      opt_state=sharded_bytes(opt, state_shardings(opt, mesh)),
                      grads=grads, temporaries=int(grad_c.memory_analysis().temp_size_in_bytes),
                      grad_program=program_bytes(grad_c), apply_program=program_bytes(apply_c))


def largest_rows(one: UpdateMemory, two: UpdateMemory, available: int) -> int:
  """Rows per device that fit ``available`` bytes, extrapolating linearly from the
  compiles at one and two rows (0: not even one row fits)."""
  per_row = max(two.total - one.total, 1)
  if one.total > available:
    return 0
  return 1 + (available - one.total) // per_row
