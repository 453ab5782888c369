"""`ContinuousSamplerEngine`: the in-process `RolloutEngine` over a pool of decode slots.

Where `graft_jax.rollout.jax_engine.JaxSamplerEngine` decodes a batch until
its longest row stops, this engine keeps a fixed pool of slots busy: a slot
whose response ends takes the next waiting (prompt, sample) at once
(`graft_jax.rollout.slot_pool`). One `generate` is one compiled call over
every prompt, however long the tail of its response lengths.

A row draws the random numbers the static sampler draws for it, so with the
same seed both give the same tokens (up to the rounding of products over a
differently padded cache). The pool runs the model one row at a time under
``jax.vmap``: on a GPU its decode attention is the live-span Pallas kernel
(`graft_jax.backends.gpu.live_decode`, each row's reads following its live
tokens) where the cache window is whole blocks of 16 slots (a ``prefill_chunk``
multiple of 16), elsewhere XLA's.

Once the queue is empty the drain halves the pool whenever the live rows fit
half of it, up to ``shrinks`` times, inside the same program
(`graft_jax.rollout.slot_pool`). With a ``mesh`` the slots are split over its
batch axes (data x fsdp), each device decoding its share of them from one
queue: the same schedule, and so the same tokens, as on one device.

After each `generate`, `last_metrics` holds the call's tokens generated, the
mean slot occupancy (busy slot-steps over the slot-steps of the pool sizes
that ran; ``slot_occupancy_full_pool``: over the whole pool at every step, as
without shrinks) and the live KV bytes the decode attention needs per step
(the keys and values of every busy row's prompt and response so far, every
layer).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax import backends
from graft_jax.rollout.decode_weights import decoding_weights
from graft_jax.rollout.kv_budget import bucket, kv_bytes_per_row
from graft_jax.rollout.slot_pool import run_pool
from graft_jax.rollout.types import RolloutBatch, SamplingParams, check_generate_args
from graft_jax.sharding import LogicalRules, batch_shards


class ContinuousSamplerEngine:
  """Samples with a `graft_jax.models.Decoder` in a pool of ``slots`` decode rows.

  Args:
    model: the decoder (its compute dtype is the sampler's).
    eos_ids: token id(s) that end a response.
    pad_id: id written after a response ends.
    slots: decode rows in the pool (its KV cache holds slots x
      (prompt capacity + max new tokens) positions).
    prefill_chunk: tokens per prefill pass; a prompt takes the next multiple of it.
    max_prompt_len: prompt capacity of the cache rows; longer prompts widen it
      (to the next power of two), which compiles another program.
    min_new_bucket / min_batch_bucket: smallest token-budget and prompt-count buckets.
    cache_dtype: KV-cache dtype (default: the model's compute dtype).
    refill: a free slot takes the next request at once; False: only once every slot
      is free (a static batch of ``slots`` rows, the baseline its occupancy is
      measured against).
    decode_attention: 'auto' (the live-span kernel on a GPU where the window allows
      it, XLA's elsewhere), 'xla' or 'live' (`graft_jax.models.Decoder.set_decode_attention`).
    shrinks: how many times the drain may halve the pool (refill only).
    mesh: optional mesh whose batch axes split the slots (``slots`` a multiple of
      their size); the weights are gathered out of those axes once per call.
  """

  def __init__(self, model, *, eos_ids: int | Sequence[int], pad_id: int, slots: int = 64,
               prefill_chunk: int = 16, max_prompt_len: int = 256, min_new_bucket: int = 16,
               min_batch_bucket: int = 1, cache_dtype=None, refill: bool = True,
               decode_attention: str = "auto", shrinks: int = 2, mesh=None):
    self.eos_ids = tuple(int(e) for e in np.atleast_1d(eos_ids))
    if not self.eos_ids:
      raise ValueError("ContinuousSamplerEngine needs at least one EOS id")
    if slots < 1 or prefill_chunk < 1:
      raise ValueError(f"ContinuousSamplerEngine: slots and prefill_chunk must be >= 1, got "
                       f"{slots} and {prefill_chunk}")
    self.pad_id = int(pad_id)
    self.slots = int(slots)
    if shrinks < 0:
      raise ValueError(f"ContinuousSamplerEngine: shrinks must be >= 0, got {shrinks}")
    self.shrinks = int(shrinks) if refill else 0  # a static batch keeps its size
    self.mesh, self.batch_axes, self.row_shards = mesh, (), 1
    if mesh is not None:
      spec = LogicalRules().spec(("batch",), mesh=mesh)[0]
      self.batch_axes = () if spec is None else (spec,) if isinstance(spec, str) else tuple(spec)
      self.row_shards = batch_shards(mesh)
      if self.slots % self.row_shards:
        raise ValueError(f"ContinuousSamplerEngine: slots ({self.slots}) must be a multiple of "
                         f"the mesh's batch devices ({self.row_shards})")
    self.prefill_chunk = int(prefill_chunk)
    self.max_prompt_len = -(-int(max_prompt_len) // self.prefill_chunk) * self.prefill_chunk
    self.min_new_bucket = min_new_bucket
    self.min_batch_bucket = min_batch_bucket
    self.cache_dtype = cache_dtype
    self.refill = bool(refill)
    if decode_attention not in ("auto", "xla", "live"):
      raise ValueError(f"ContinuousSamplerEngine: decode_attention must be auto, xla or live, "
                       f"got {decode_attention!r}")
    if decode_attention == "auto":
      # Windows are a chunk multiple plus a power of two >= 16: whole kernel blocks when
      # the chunk is a multiple of 16.
      gpu = backends.platform() == "gpu" and jax.default_backend() == "gpu"
      decode_attention = "live" if gpu and self.prefill_chunk % 16 == 0 else "xla"
    self.decode_attention = decode_attention
    self.model_cfg = model.cfg
    self.dtype = model.dtype
    self.kv_itemsize = jnp.dtype(cache_dtype or model.dtype).itemsize
    self.last_metrics: dict[str, float] = {}
    self.set_weights(model)

  def set_weights(self, model) -> None:
    """Uses `model`'s weights from now on: an nnx decoder, or its `nnx.State`.
    Only the state is replaced; the compiled programs are reused."""
    if isinstance(model, nnx.Module):
      copy = nnx.merge(*nnx.split(model))
      # Rows decode one at a time under vmap, each writing its own slot: not the
      # CPU kernel, which takes one write slot for the whole batch.
      copy.set_decode_attention(self.decode_attention)
      self.graphdef, state = nnx.split(copy)
      self.vocab_size = model.cfg.vocab_size
    else:
      state = model
    self.state = state

  def generate(self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams,
               budgets: Sequence[int] | None = None) -> RolloutBatch:
    """Samples `n` responses per token-id prompt; see `RolloutBatch` for the fields.

    ``budgets`` (one per response, row ``i * n + j``; default
    ``params.max_new_tokens`` for all) caps each response's tokens."""
    check_generate_args(prompts, n)
    num, rows, steps = len(prompts), len(prompts) * n, params.max_new_tokens
    longest = max(len(p) for p in prompts)
    width = self.max_prompt_len if longest <= self.max_prompt_len else bucket(longest, 1)
    width = -(-width // self.prefill_chunk) * self.prefill_chunk
    p_bucket = bucket(num, self.min_batch_bucket)
    ids = np.full((p_bucket, width), self.pad_id, np.int32)
    lens = np.ones((p_bucket,), np.int32)
    for i, p in enumerate(prompts):
      ids[i, :len(p)], lens[i] = p, len(p)
    budget_R = np.full((p_bucket * n,), steps, np.int32)
    if budgets is not None:
      if len(budgets) != rows or min(budgets) < 1 or max(budgets) > steps:
        raise ValueError(f"generate: budgets must be {rows} values in [1, {steps}]")
      budget_R[:rows] = budgets
    greedy = params.temperature == 0
    out = run_pool(
        self.graphdef, decoding_weights(self.state, self.dtype, self.batch_axes), ids, lens,
        jnp.int32(rows), budget_R, jax.random.key(params.seed),
        jnp.float32(params.temperature if not greedy else 1.0), jnp.float32(params.top_p),
        n=n, slots=self.slots, max_new=bucket(steps, self.min_new_bucket),
        chunk=self.prefill_chunk, eos_ids=self.eos_ids, pad_id=self.pad_id, greedy=greedy,
        top_k=0 if greedy else min(params.top_k, self.vocab_size),
        use_top_p=not greedy and params.top_p < 1.0, cache_dtype=self.cache_dtype,
        refill=self.refill, shrinks=self.shrinks, mesh=self.mesh, batch_axes=self.batch_axes)
    out = jax.device_get(out)
    lengths = np.asarray(out.lengths_R[:rows])
    self.last_metrics = self._metrics(out, lengths)
    mask_BxL = np.arange(steps)[None, :] < lengths[:, None]
    finished = np.asarray(out.finished_R[:rows], bool)
    return RolloutBatch(
        tokens_BxL=np.asarray(out.tokens_RxM[:rows, :steps], np.int32), mask_BxL=mask_BxL,
        logp_BxL=np.where(mask_BxL, out.logp_RxM[:rows, :steps], 0.0).astype(np.float32),
        finished_B=finished, truncated_B=~finished,
        prompt_index_B=np.repeat(np.arange(num, dtype=np.int32), n), n=n)

  def _metrics(self, out, lengths) -> dict[str, float]:
    """The call's tokens generated, mean slot occupancy and live KV bytes per decode step."""
    iterations = max(1, int(out.iterations))
    per_token = kv_bytes_per_row(self.model_cfg, slots=1, itemsize=self.kv_itemsize)
    busy = float(out.busy_slot_steps)
    return {"tokens": float(lengths.sum()), "decode_steps": float(out.iterations),
            "slot_occupancy": busy / max(1, int(out.pool_slot_steps)),
            "slot_occupancy_full_pool": busy / (iterations * self.slots),
            "live_kv_bytes_per_step": float(out.live_kv_tokens) * per_token / iterations}

  def compiled_programs(self) -> int:
    """How many programs the pool has compiled in this process (all engines)."""
    return run_pool._cache_size()  # pylint: disable=protected-access
