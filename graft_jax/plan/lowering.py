"""Every program a pair's run compiles, lowered for a GPU (CUDA) or a TPU on any machine.

``jax.export`` with ``platforms=`` lowers a program for hardware that is not
here: every shape rule runs, and each Pallas kernel goes through its own
lowering (Triton on a GPU, Mosaic on a TPU), short of compiling. Under
`graft_jax.backends.traced_for` with ``lowering`` the programs are traced as
that hardware runs them: the kernels native, not in Pallas's interpreter, and
'auto' resolved for the target (cuDNN's attention on a GPU, splash on a TPU,
the live-span decode kernels); a GPU's questions about itself are answered as an
H100's (`h100_cudnn`). So a CPU finds what would fail on a GPU's first step,
before any GPU runs the code.

The programs are the run's own, built from a run config: the samplers' jitted
calls with the engines' own arguments (`JaxSamplerEngine.call_args`,
`ContinuousSamplerEngine.call_args`), the scorer's packed and bucketed programs
(own rows, and a peer's re-tokenized rows past the length budget), the update's
gradient programs (`graft_jax.train.update.update_program`, rows packed or
bucketed) and its optimizer step, and validation's top-p sampler. Each model
keeps its real widths, heads, head_dim and vocabulary with abstract weights
(``nnx.eval_shape``), a few layers (of each kind: SmolLM3's NoPE layers too) and
small batches: the layers repeat one block's program, and shapes cost nothing to
trace. The pool's, scoring's and the update's programs are lowered on a run's mesh
too (`SHARDED_PROGRAMS`, over fake CPU devices), sharded as a run on several
devices shards them: a Pallas kernel under a mesh must run on each device's rows
(`graft_jax.models.attention.per_device_rows`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re

import jax
import jax.numpy as jnp
from flax import nnx
from jax import export
from jax._src.cudnn import fused_attention_stablehlo as cudnn_attention

from graft_jax import backends
from graft_jax.config.checks import policy_configs
from graft_jax.models import logprobs
from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import Decoder
from graft_jax.packing import sequence_packing
from graft_jax.plan.memory import packed_grad_args, placed, sharded_update_program
from graft_jax.plan.phases import eval_calls
from graft_jax.plan.run import model_config
from graft_jax.rollout import ContinuousSamplerEngine, JaxSamplerEngine, SamplingParams
from graft_jax.rollout.kv_budget import bucket
from graft_jax.rollout.sampler import generate_padded
from graft_jax.rollout.slot_pool import run_pool
from graft_jax.sharding import batch_shards, batch_sharding, state_shardings
from graft_jax.train import methods, packed_micro_batches
from graft_jax.train.policy import PoolSettings
from graft_jax.train.update import make_optimizer, micro_batch_budget, update_program

# jax.export's platform name -> the backend `traced_for` takes.
PLATFORMS = {"cuda": "gpu", "tpu": "tpu"}
# The programs a run on several devices compiles sharded on its mesh that `lower` lowers so.
SHARDED_PROGRAMS = ("pool", "scoring_packed", "scoring_bucketed", "exchange_scoring",
                    "update_packed", "update_bucketed", "optimizer_step", "validation_pool")
PROGRAMS = ("sampler", "pool", "scoring_packed", "scoring_bucketed", "exchange_scoring",
            "update_packed", "update_bucketed", "optimizer_step", "validation",
            "validation_pool")
# The kernels' custom calls, which jax.export refuses unless told: none has a stable ABI.
TRITON, MOSAIC_TPU = "__gpu$xla.gpu.triton", "tpu_custom_call"
CUDNN_FORWARD, CUDNN_BACKWARD = "__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"
KERNEL_CALLS = (TRITON, "triton_kernel_call", MOSAIC_TPU, CUDNN_FORWARD, CUDNN_BACKWARD)
# Prompts per static sampler call and the longest prompt (its bucket), micro-batches per
# gradient program: small, since only their shapes are traced.
PROMPTS, PROMPT_TOKENS, MICRO_BATCHES = 2, 400, 2
# H100's answers to cuDNN's queries: compute capability 9.0, cuDNN 9.10.
H100_CAPABILITY, H100_CUDNN = (9, 0), 91000


def few_layers(mc: ModelConfig, layers: int = 2) -> ModelConfig:
  """``mc`` with ``layers`` layers, keeping one of each kind it has (RoPE and NoPE)."""
  kinds = sorted(set(mc.use_rope_layers), reverse=True)
  return dataclasses.replace(mc, num_layers=layers,
                             use_rope_layers=tuple(kinds[i % len(kinds)] for i in range(layers)))


def abstract_decoder(cfg, mc: ModelConfig) -> Decoder:
  """The run's decoder of ``mc`` with abstract weights, its memory options and decode
  attention as `graft_jax.train.setup.load_models` sets them."""
  perf = cfg.perf

  def build():
    model = Decoder(mc, rngs=nnx.Rngs(0), param_dtype=jnp.dtype(cfg.param_dtype),
                    dtype=jnp.dtype(cfg.dtype))
    model.set_memory_options(remat=perf.remat, scan_layers=perf.scan_layers,
                             attention=perf.attention_impl, attention_block=perf.attention_block,
                             score_tokens=micro_batch_budget(perf.micro_batch_tokens),
                             kv_cache_bytes=perf.sampler_max_kv_bytes)
    model.set_decode_attention(perf.decode_attention)
    return model

  return nnx.eval_shape(build)


def _spec(shape, dtype):
  return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))


def _decoding(state, dtype):
  """The weights a sampler decodes from (`graft_jax.rollout.decode_weights`): floating
  ones in the compute dtype."""
  return jax.tree.map(lambda x: _spec(x.shape, dtype if jnp.issubdtype(x.dtype, jnp.floating)
                                      else x.dtype), state)


def _ids(mc: ModelConfig) -> tuple[int, int]:
  return mc.eos_token_ids[0] if mc.eos_token_ids else 0, mc.pad_token_id or 0


def _sampler(cfg, model, params: SamplingParams, n: int):
  eos, pad = _ids(model.cfg)
  engine = JaxSamplerEngine(model, eos_ids=eos, pad_id=pad,
                            streams=cfg.perf.sampler_streams or None)
  prompt_len = bucket(PROMPT_TOKENS, engine.min_prompt_bucket)
  args, kw = engine.call_args(
      _decoding(engine.state, engine.dtype), _spec((PROMPTS, prompt_len), jnp.int32),
      _spec((PROMPTS, prompt_len), bool), _spec((PROMPTS,), bool), params, n=n,
      max_new=bucket(params.max_new_tokens, engine.min_new_bucket), row_offset=0,
      total_rows=PROMPTS * n)
  return generate_padded, args, kw


def _pool(cfg, model, params: SamplingParams, n: int, requests: int, mesh=None):
  """The slot pool's call; on ``mesh``, its slots split over the batch axes and the
  weights sharded as the policy's."""
  pool = PoolSettings.from_config(dataclasses.replace(
      cfg, rollout=dataclasses.replace(cfg.rollout, sampler="pool")))
  eos, pad = _ids(model.cfg)
  engine = ContinuousSamplerEngine(
      model, eos_ids=eos, pad_id=pad, slots=pool.slots, prefill_chunk=pool.prefill_chunk,
      prefill_group=pool.prefill_group, refill_at=pool.refill_at,
      max_prompt_len=pool.max_prompt_len,
      max_new_tokens=pool.max_new_tokens, max_requests=max(pool.max_requests, requests),
      mesh=mesh)
  r, state = engine.max_requests, _decoding(engine.state, engine.dtype)
  if mesh is not None:
    state = placed(state, state_shardings(engine.state, mesh))
  args, kw = engine.call_args(state, _spec((r, engine.max_prompt_len), jnp.int32),
                              _spec((r,), jnp.int32), _spec((r,), jnp.int32), params,
                              rows=requests, n=n)
  return run_pool, args, kw


def _scoring(model, *, packed: bool, length: int, mesh=None):
  """The scorer's program (`graft_jax.train.row_logprobs.score_rows`: packed rows with
  segment ids; bucketed: rows padded to a length bucket) over calls of ``length``; on
  ``mesh``, each device's rows against the sharded weights (`logprobs.row_sharding`)."""
  graphdef, state = nnx.split(model)
  shards = 1 if mesh is None else batch_shards(mesh)
  most = max(1, 64 // shards)  # `score_rows`'s rows per device
  rows = min(sequence_packing.rows_per_call(model.score_tokens, length, most), most) * shards
  ids, mask = _spec((rows, length), jnp.int32), _spec((rows, length), jnp.int32 if packed else bool)
  if mesh is not None:
    state = placed(state, state_shardings(state, mesh))
    ids, mask = (jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=batch_sharding(mesh))
                 for x in (ids, mask))
  # pylint: disable=protected-access
  fn = logprobs._token_logprobs_packed if packed else logprobs._token_logprobs_split
  return fn, (graphdef, state, ids, mask, _spec((), jnp.float32)), {}


def _update(cfg, model, *, packed: bool, step: bool = False, mesh=None):
  """The update's gradient program (or, ``step``, its optimizer step) over micro-batches
  of the rows of the run's length budget each device takes (`packed_micro_batches` /
  `length_packing`); on ``mesh``, sharded as the run shards it."""
  graphdef, params = nnx.split(model)
  cap = cfg.max_prompt_len + cfg.max_response_len
  width = logprobs.bucket_length(cap, cap)  # the run's length budget (`train.step`)
  rows = sequence_packing.rows_per_call(micro_batch_budget(cfg.perf.micro_batch_tokens), width, 1)
  tx, loss = make_optimizer(cfg.optimizer), methods.make(cfg).loss_fn
  if mesh is not None:
    (grads, grad_args), (apply, apply_args) = sharded_update_program(
        graphdef, params, tx, loss, mesh, rows=rows * batch_shards(mesh), length=width,
        slots=MICRO_BATCHES, packed=packed)
  else:
    view = rows * packed_micro_batches.SEQS_PER_ROW if packed else rows
    (grads, grad_args), (apply, apply_args) = update_program(
        graphdef, params, tx, loss, rows=view, length=width, slots=MICRO_BATCHES)
    if packed:
      grad_args = packed_grad_args(grad_args, rows=rows, length=width, slots=MICRO_BATCHES)
  return (apply, apply_args, {}) if step else (grads, grad_args, {})


def build(cfg, program: str, mc: ModelConfig, mesh=None):
  """(jitted function, positional, keyword) of ``program`` for the model ``mc`` of the run
  ``cfg``; call it under `graft_jax.backends.traced_for` (the engines read the target).
  With ``mesh``, one of `SHARDED_PROGRAMS`, sharded on it as the run's."""
  if mesh is not None and program not in SHARDED_PROGRAMS:
    raise ValueError(f"{program!r} is not lowered on a mesh here; {SHARDED_PROGRAMS} are")
  model = abstract_decoder(cfg, few_layers(mc))
  train = SamplingParams(max_new_tokens=cfg.max_response_len, temperature=cfg.rollout.temperature,
                         top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k, seed=cfg.seed)
  e = cfg.eval
  val = SamplingParams(max_new_tokens=cfg.max_response_len, temperature=e.temperature,
                       top_p=e.top_p, seed=cfg.seed)
  cap = cfg.max_prompt_len + cfg.max_response_len
  row = sequence_packing.packed_row_length(cap)
  builders = {
      "sampler": lambda: _sampler(cfg, model, train, cfg.n),
      "pool": lambda: _pool(cfg, model, train, cfg.n, cfg.prompts_per_step * cfg.n, mesh),
      "scoring_packed": lambda: _scoring(model, packed=True, length=row, mesh=mesh),
      "scoring_bucketed": lambda: _scoring(model, packed=False, mesh=mesh,
                                           length=logprobs.bucket_length(cap, cap)),
      # A peer's text re-tokenized past the budget: a row of its own, twice as long.
      "exchange_scoring": lambda: _scoring(model, packed=True, mesh=mesh,
                                           length=sequence_packing.long_row_length(row + 1, row)),
      "update_packed": lambda: _update(cfg, model, packed=True, mesh=mesh),
      "update_bucketed": lambda: _update(cfg, model, packed=False, mesh=mesh),
      "optimizer_step": lambda: _update(cfg, model, packed=False, step=True, mesh=mesh),
      "validation": lambda: _sampler(cfg, model, val, e.k),
      # The pool takes the whole suite in one call (`Validator`).
      "validation_pool": lambda: _pool(cfg, model, val, e.k, eval_calls(cfg, pool=True)[0] * e.k,
                                       mesh),
  }
  return builders[program]()


@contextlib.contextmanager
def h100_cudnn():
  """Programs traced inside are lowered for an H100 (compute capability 9.0) with cuDNN
  9.10 where no GPU is: under `graft_jax.backends.traced_for` ('gpu', ``lowering``) with
  the H100's capability named, so the backend door picks the kernels an H100 runs
  (packed rows in cuDNN's packed layout) and every trace is keyed by that capability;
  and cuDNN's queries of the local GPU and library answered as that H100's
  (`jax._src.cudnn.fused_attention_stablehlo.check_cudnn_version`,
  `check_compute_capability`, `is_cuda_compute_capability_equal`), so cuDNN's attention
  lowers. Nothing else changes: cuDNN's shape and layout checks and the door's other
  conditions run as on the GPU."""
  names = ("check_cudnn_version", "check_compute_capability", "is_cuda_compute_capability_equal")
  saved = {n: getattr(cudnn_attention, n) for n in names}
  capability = lambda c: tuple(int(x) for x in c.split("."))
  answers = (lambda: H100_CUDNN, lambda c: H100_CAPABILITY >= capability(c),
             lambda c: H100_CAPABILITY == capability(c))
  try:
    for n, answer in zip(names, answers):
      setattr(cudnn_attention, n, answer)
    with backends.traced_for("gpu", lowering=True,
                             capability=".".join(map(str, H100_CAPABILITY))):
      yield
  finally:
    for n, fn in saved.items():
      setattr(cudnn_attention, n, fn)


def lower(cfg, program: str, mc: ModelConfig, platform: str, *, as_h100: bool = True,
          mesh=None) -> export.Exported | jax.stages.Lowered:
  """``program`` of the model ``mc`` lowered for ``platform`` ('cuda' or 'tpu'); for CUDA
  with ``as_h100`` as for an H100 (`h100_cudnn`), else for a GPU of no known capability
  (cuDNN's attention then stops at its version query). With ``mesh`` (its devices any:
  fake CPU ones), sharded on it: lowered by ``jit`` alone, since cuDNN's attention is
  partitioned by a Python callback (``custom_partitioning``) that ``jax.export`` cannot
  serialize."""
  as_h100 = as_h100 and platform == "cuda"
  with h100_cudnn() if as_h100 else backends.traced_for(PLATFORMS[platform], lowering=True):
    fn, args, kw = build(cfg, program, mc, mesh)
    if mesh is not None:
      with jax.set_mesh(mesh):
        return fn.trace(*args, **kw).lower(lowering_platforms=(platform,))
    return export.export(fn, platforms=[platform], disabled_checks=[
        export.DisabledSafetyCheck.custom_call(c) for c in KERNEL_CALLS])(*args, **kw)


def program_text(lowered: export.Exported | jax.stages.Lowered) -> str:
  """A lowered program's StableHLO."""
  return lowered.mlir_module() if isinstance(lowered, export.Exported) else lowered.as_text()


def kernel_calls(lowered: export.Exported | jax.stages.Lowered) -> set[str]:
  """The kernels' custom-call targets in a lowered program."""
  return set(re.findall(r"custom_call @([\w$.]+)", program_text(lowered))) & set(KERNEL_CALLS)


def run_models(cfg) -> dict[str, ModelConfig]:
  """The run's models by name (`graft_jax.plan.run.model_config`: the folder's config.json,
  else the preset of its name)."""
  return {m.name: model_config(m) for m in policy_configs(cfg)}
