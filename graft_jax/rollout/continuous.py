"""`ContinuousSamplerEngine`: the in-process `RolloutEngine` over a pool of decode slots.

Where `graft_jax.rollout.jax_engine.JaxSamplerEngine` decodes a batch until
its longest row stops, this engine keeps a fixed pool of slots busy: a slot
whose response ends takes the next waiting (prompt, sample) at once
(`graft_jax.rollout.slot_pool`). One `generate` is one compiled call over
every prompt, however long the tail of its response lengths.

A row draws the random numbers the static sampler draws for it, so with the
same seed both give the same tokens (up to the rounding of products over a
differently padded cache). The pool runs the model one row at a time under
``jax.vmap``: on a GPU or TPU its decode attention is a live-span Pallas kernel
(`graft_jax.backends.gpu.live_decode`, `graft_jax.backends.tpu.live_decode`:
each row's reads follow its live tokens) where the cache window is whole
kernel blocks (a ``prefill_chunk`` multiple of 16, of 128 on a TPU), elsewhere
XLA's. A prompt is prefilled in chunks of
``prefill_chunk`` tokens, each attending flash-style over the key blocks up to its
last slot, not the whole window (`graft_jax.models.chunk_attention`; where the
window is short enough for the model's attention to be 'dense', XLA's dense
attention over it).

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
layer; ``idle_kv_bytes_per_step``: those a free slot's row attends to, one slot
each). The batch carries them too (`RolloutBatch.engine_metrics`), so a training
step logs its rollout call's.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax import backends
from graft_jax.rollout.decode_weights import decoding_weights
from graft_jax.rollout.kv_budget import bucket, kv_bytes_per_row, pool_prompt_width
from graft_jax.rollout.slot_pool import run_pool
from graft_jax.rollout.types import RolloutBatch, SamplingParams, check_generate_args
from graft_jax.sharding import batch_axes, batch_shards


DEFAULT_SHRINKS = 2  # the drain halves the pool at most this often (1.5x cache at the first)


class ContinuousSamplerEngine:
  """Samples with a `graft_jax.models.Decoder` in a pool of ``slots`` decode rows.

  Args:
    model: the decoder (its compute dtype is the sampler's).
    eos_ids: token id(s) that end a response.
    pad_id: id written after a response ends.
    slots: decode rows in the pool (its KV cache holds slots x
      (prompt capacity + max new tokens) positions).
    prefill_chunk: tokens per prefill pass; a prompt takes the next multiple of it.
    prefill_group: prompts a refill prefills together, of mixed lengths, in one batched
      pass per chunk (at most ``slots`` per device): the first fill of the pool takes
      ``slots / prefill_group`` passes, not ``slots``; a pass costs the group's rows
      however few are admitted.
    max_prompt_len / max_new_tokens / max_requests: the capacities the program is
      compiled for: response tokens per cache row and requests (prompts x samples)
      per call; ``max_prompt_len``, the run's longest prompt, is the widest window
      planned for. A call's window holds its own prompts: their longest, rounded up
      to a power of two in whole chunks (`kv_budget.pool_prompt_width`), so a call
      compiles one program per prompt bucket, whatever its prompt count, sample
      count and lengths. A call past ``max_new_tokens`` or ``max_requests`` raises
      it (to the next power of two) for this and every later call.
      ``max_new_tokens`` is held as a power of two >= 16.
    cache_dtype: KV-cache dtype (default: the model's compute dtype).
    refill: a free slot takes the next request at once; False: only once every slot
      is free (a static batch of ``slots`` rows, the baseline its occupancy is
      measured against).
    refill_at: with refill, a device admits waiting requests once this many of its
      slots are free (or the queue fits them): one prefill pass per ``refill_at``
      requests instead of one per freed slot (`graft_jax.rollout.slot_pool`).
    decode_attention: 'auto' (a live-span kernel on a GPU or TPU where the window allows
      it, XLA's elsewhere), 'xla' or 'live' (`graft_jax.models.Decoder.set_decode_attention`).
    shrinks: how many times the drain may halve the pool (refill only).
    mesh: optional mesh whose batch axes split the slots (``slots`` a multiple of
      their size); the weights are gathered out of those axes once per call.
  """

  def __init__(self, model, *, eos_ids: int | Sequence[int], pad_id: int, slots: int = 64,
               prefill_chunk: int = 16, prefill_group: int = 8, max_prompt_len: int = 256,
               max_new_tokens: int = 16, max_requests: int = 1, cache_dtype=None,
               refill: bool = True, refill_at: int = 1,
               decode_attention: str = "auto", shrinks: int = DEFAULT_SHRINKS, mesh=None):
    self.eos_ids = tuple(int(e) for e in np.atleast_1d(eos_ids))
    if not self.eos_ids:
      raise ValueError("ContinuousSamplerEngine needs at least one EOS id")
    if min(slots, prefill_chunk, prefill_group, refill_at) < 1:
      raise ValueError(f"ContinuousSamplerEngine: slots, prefill_chunk, prefill_group and "
                       f"refill_at must be >= 1, got {slots}, {prefill_chunk}, {prefill_group} "
                       f"and {refill_at}")
    self.pad_id = int(pad_id)
    self.slots = int(slots)
    if shrinks < 0:
      raise ValueError(f"ContinuousSamplerEngine: shrinks must be >= 0, got {shrinks}")
    self.shrinks = int(shrinks) if refill else 0  # a static batch keeps its size
    self.mesh, self.batch_axes, self.row_shards = mesh, (), 1
    if mesh is not None:
      self.batch_axes = batch_axes(mesh)
      self.row_shards = batch_shards(mesh)
      if self.slots % self.row_shards:
        raise ValueError(f"ContinuousSamplerEngine: slots ({self.slots}) must be a multiple of "
                         f"the mesh's batch devices ({self.row_shards})")
    self.prefill_chunk = int(prefill_chunk)
    self.prefill_group = int(prefill_group)
    if min(max_prompt_len, max_new_tokens, max_requests) < 1:
      raise ValueError(f"ContinuousSamplerEngine: max_prompt_len, max_new_tokens and "
                       f"max_requests must be >= 1, got {max_prompt_len}, {max_new_tokens} "
                       f"and {max_requests}")
    self.max_prompt_len = pool_prompt_width(max_prompt_len, self.prefill_chunk)
    # A power of two >= the live kernel's granule (16, a TPU's 128): with a chunk
    # multiple of it, windows of whole kernel blocks.
    self.granule = backends.live_decode_granule()
    self.max_new_tokens = bucket(max_new_tokens, self.granule)
    self.max_requests = int(max_requests)
    self.cache_dtype = cache_dtype
    self.refill, self.refill_at = bool(refill), int(refill_at)
    if decode_attention not in ("auto", "xla", "live"):
      raise ValueError(f"ContinuousSamplerEngine: decode_attention must be auto, xla or live, "
                       f"got {decode_attention!r}")
    if decode_attention == "auto":
      # Windows are a chunk multiple plus a power of two >= the granule: whole kernel
      # blocks when the chunk is a multiple of it.
      whole_blocks = self.prefill_chunk % self.granule == 0
      decode_attention = "live" if whole_blocks and backends.live_decode_by_default() else "xla"
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
    # The window holds this call's prompts (their longest, bucketed), not the run's
    # longest: a call of short prompts holds and reads a short cache.
    width = pool_prompt_width(max(len(p) for p in prompts), self.prefill_chunk)
    self.max_prompt_len = max(self.max_prompt_len, width)
    if steps > self.max_new_tokens:
      self.max_new_tokens = bucket(steps, self.granule)
    if rows > self.max_requests:
      self.max_requests = bucket(rows, 1)
    # One prompt row per request bounds the prompts whatever n is.
    ids = np.full((self.max_requests, width), self.pad_id, np.int32)
    lens = np.ones((self.max_requests,), np.int32)
    for i, p in enumerate(prompts):
      ids[i, :len(p)], lens[i] = p, len(p)
    budget_R = np.full((self.max_requests,), steps, np.int32)
    if budgets is not None:
      if len(budgets) != rows or min(budgets) < 1 or max(budgets) > steps:
        raise ValueError(f"generate: budgets must be {rows} values in [1, {steps}]")
      budget_R[:rows] = budgets
    args, kw = self.call_args(decoding_weights(self.state, self.dtype, self.batch_axes), ids,
                              lens, budget_R, params, rows=rows, n=n)
    out = run_pool(*args, **kw)
    # Only this call's rows cross to the host, however large the capacity.
    out = jax.device_get(out._replace(
        tokens_RxM=out.tokens_RxM[:rows, :steps], logp_RxM=out.logp_RxM[:rows, :steps],
        lengths_R=out.lengths_R[:rows], finished_R=out.finished_R[:rows]))
    lengths = np.asarray(out.lengths_R)
    self.last_metrics = self._metrics(out, lengths)
    mask_BxL = np.arange(steps)[None, :] < lengths[:, None]
    finished = np.asarray(out.finished_R, bool)
    return RolloutBatch(
        tokens_BxL=np.asarray(out.tokens_RxM, np.int32), mask_BxL=mask_BxL,
        logp_BxL=np.where(mask_BxL, out.logp_RxM, 0.0).astype(np.float32),
        finished_B=finished, truncated_B=~finished,
        prompt_index_B=np.repeat(np.arange(num, dtype=np.int32), n), n=n,
        engine_metrics=dict(self.last_metrics))

  def call_args(self, state, prompts_PxL, prompt_len_P, budget_R, params: SamplingParams, *,
                rows: int, n: int) -> tuple[tuple, dict]:
    """The arguments of the `run_pool` call that samples ``rows`` requests, ``n`` per prompt
    (the arrays at the capacities' shapes: host arrays, or abstract ones for a planner
    that lowers the program, `graft_jax.plan.lowering`): (positional, keyword)."""
    greedy = params.temperature == 0
    return ((self.graphdef, state, prompts_PxL, prompt_len_P, jnp.int32(rows), jnp.int32(n),
             budget_R, jax.random.key(params.seed),
             jnp.float32(params.temperature if not greedy else 1.0), jnp.float32(params.top_p)),
            dict(slots=self.slots, max_new=self.max_new_tokens, chunk=self.prefill_chunk,
                 group=self.prefill_group, eos_ids=self.eos_ids, pad_id=self.pad_id,
                 greedy=greedy, top_k=0 if greedy else min(params.top_k, self.vocab_size),
                 use_top_p=not greedy and params.top_p < 1.0, cache_dtype=self.cache_dtype,
                 refill=self.refill, refill_at=self.refill_at, shrinks=self.shrinks,
                 mesh=self.mesh, batch_axes=self.batch_axes))

  def _metrics(self, out, lengths) -> dict[str, float]:
    """The call's tokens generated, mean slot occupancy, live (and free slots') KV bytes
    per decode step, and refill passes (the most on any device)."""
    iterations = max(1, int(out.iterations))
    per_token = kv_bytes_per_row(self.model_cfg, slots=1, itemsize=self.kv_itemsize)
    busy = float(out.busy_slot_steps)
    return {"tokens": float(lengths.sum()), "decode_steps": float(out.iterations),
            "slot_occupancy": busy / max(1, int(out.pool_slot_steps)),
            "slot_occupancy_full_pool": busy / (iterations * self.slots),
            "live_kv_bytes_per_step": float(out.live_kv_tokens) * per_token / iterations,
            "idle_kv_bytes_per_step": float(out.idle_kv_slots) * per_token / iterations,
            "prefill_passes": float(out.prefill_passes)}

  def compiled_programs(self) -> int:
    """How many programs the pool has compiled in this process (all engines)."""
    return run_pool._cache_size()  # pylint: disable=protected-access
