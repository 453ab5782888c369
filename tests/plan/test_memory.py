"""The memory plan of a narrow model: temporaries follow the micro-batch, not the minibatch,
with remat one layer's attention scores at most are live (read from memory_analysis on CPU),
and a plan traced for a GPU holds no CPU-only code."""

import dataclasses

import jax
import pytest

from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.sharding import MeshConfig, make_mesh
from graft_jax.plan.memory import largest_rows, update_memory
from graft_jax.config.run_config import OptimizerConfig
from graft_jax.train.methods.base import ClippedTokenLoss
from graft_jax.train.packed_micro_batches import SEQS_PER_ROW
from graft_jax.train.update import make_optimizer

pytestmark = pytest.mark.slow  # about ten compiles of a narrow model's update

T = 512  # long enough that one layer's scores (4 MiB) outweigh its weights (0.15 MiB)
NARROW = ModelConfig(model_type="qwen3", vocab_size=128, hidden_size=64, intermediate_size=128,
                     num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True)
SCORES = NARROW.num_heads * T * T * 4  # one row's fp32 attention scores of one layer


@pytest.fixture(scope="module")
def memory():
  mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
  tx = make_optimizer(OptimizerConfig())

  def run(rows=1, minibatch=4, layers=2, remat="full", scan=True, attention="dense",
          packed=False):
    cfg = dataclasses.replace(NARROW, num_layers=layers, use_rope_layers=(1,) * layers)
    return update_memory(cfg, mesh, tx, ClippedTokenLoss(), rows_per_device=rows, length=T,
                         minibatch_rows=minibatch, remat=remat, scan_layers=scan,
                         attention=attention, attention_block=64, platform="cpu",
                         packed=packed)
  return run


def test_temporaries_follow_the_micro_batch_not_the_minibatch(memory):
  one, two = memory(rows=1), memory(rows=2)
  assert two.temporaries > one.temporaries
  big_minibatch = memory(rows=1, minibatch=16)  # 16 micro-batches instead of 4
  assert big_minibatch.temporaries == one.temporaries
  assert largest_rows(one, two, one.total - 1) == 0
  assert largest_rows(one, two, two.total) >= 2


def test_with_remat_at_most_one_layers_scores_are_live(memory):
  # Two more layers without remat keep two more layers' scores (and softmax) for the
  # backward pass; with remat only each layer's input row stays.
  plain = memory(layers=4, remat="none", scan=False).temporaries - memory(
      layers=2, remat="none", scan=False).temporaries
  remat = memory(layers=4).temporaries - memory(layers=2).temporaries
  assert plain >= 2 * SCORES
  assert remat < SCORES / 2
  assert memory(layers=4).temporaries < memory(layers=4, remat="none", scan=False).temporaries


def test_a_packed_update_is_planned_as_the_run_compiles_it(memory):
  """``perf.packed_update``: the gradient program takes packed rows and the loss reads
  their row view, `SEQS_PER_ROW` rows per packed row. Its inputs are the bucketed
  program's over as many rows as the row view, plus the packing of each micro-batch:
  the packed rows' ids and segment ids (R x T) and each row-view row's place (2 x V),
  int32. Outputs and donations are the same, so the difference is exactly that."""
  rows, slots = 1, 8
  packed = memory(rows=rows, minibatch=rows * slots, packed=True)
  view = memory(rows=rows * SEQS_PER_ROW, minibatch=rows * SEQS_PER_ROW * slots)
  inputs = lambda m: m.grad_program - m.temporaries  # arguments + outputs - donated
  assert inputs(packed) - inputs(view) == slots * (2 * rows * T + 2 * rows * SEQS_PER_ROW) * 4
  assert packed.params == view.params and packed.opt_state == view.opt_state


def test_fixed_state_is_counted_from_the_shardings(memory):
  m = memory()
  n_params = sum(x.size for x in jax.tree.leaves(nnx.state(init_model(NARROW))))
  assert m.params == 4 * n_params and m.opt_state == 2 * m.params + 8  # mu, nu + 2 int32 counts
  assert m.grads == m.params


def test_blocked_attention_keeps_no_layers_scores(memory):
  # Dense attention recomputes one layer's T x T scores in the backward pass; blocked
  # attention holds 64 x 64 blocks of them.
  dense, blocked = memory(), memory(attention="blocked")
  assert dense.temporaries - blocked.temporaries > SCORES / 2


def test_a_gpu_plan_traces_no_cpu_only_code_and_plans_cudnn_as_blocked():
  from graft_jax.plan import memory as memory_lib
  assert memory_lib.planned_attention("auto", "gpu", dtype="bfloat16", head_dim=128, length=8192,
                                      block=512) == "blocked"
  assert memory_lib.planned_attention("auto", "cpu", dtype="float32", head_dim=16, length=256,
                                      block=512) == "dense"
  calls = []
  real = memory_lib.backends.cpu.matmul_cpu
  memory_lib.backends.cpu.matmul_cpu = lambda *a: calls.append(1) or real(*a)
  try:
    mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
    kw = dict(rows_per_device=1, length=64, minibatch_rows=2, attention_block=64)
    update_memory(NARROW, mesh, make_optimizer(OptimizerConfig()), ClippedTokenLoss(),
                  platform="gpu", **kw)
    assert not calls  # the CPU matmul's custom VJP is not in a GPU program
    update_memory(NARROW, mesh, make_optimizer(OptimizerConfig()), ClippedTokenLoss(),
                  platform="cpu", **kw)
    assert calls  # and the check can fail
  finally:
    memory_lib.backends.cpu.matmul_cpu = real
