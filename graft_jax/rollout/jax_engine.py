"""`JaxSamplerEngine`: the in-process `RolloutEngine` over a graft_jax decoder.

Shapes are bucketed (prompt count, prompt length, new-token budget), so a run
compiles a handful of programs and then reuses them; `set_weights` only swaps
the parameter state, which never recompiles. Under a KV-cache byte budget the
prompts decode in equal chunks that fit it (`graft_jax.rollout.kv_budget`),
each row drawing the random numbers it would draw in one call over all of
them. A smaller call's products round differently, so now and then a row
takes another token: 1 row of 512 did, at its 117th token, when the speed
benchmark's 64 prompts x 8 x 128 tokens ran as four calls instead of one.

On a CPU the prompts also decode in several calls that run side by side
(`streams`, each from its own host thread). One decode step is a chain of
small operations, many of which XLA runs on one core, so a lone call leaves
the other cores waiting in those; calls side by side fill the gaps
(BENCHMARKS.md has the speed benchmark's figures). The calls side by side give
bit for bit what the same calls give one after another.

Under a mesh the prompts, and so every decode row and its KV cache, are split
over the batch axes (data x fsdp, `graft_jax.sharding.batch_sharding`): each
device samples its share, instead of every device sampling every row. Each
`generate` first casts the weights to the sampling dtype and gathers them out
of the trainer's FSDP shards (`graft_jax.rollout.decode_weights`), once, so
no decode step casts or gathers a weight. Under several processes each
hands in only its devices' prompts (`graft_jax.distributed.to_global`) and the
responses are gathered back (`to_host`).

On one GPU a decode step attends in the live-span Pallas kernel
(`graft_jax.backends.gpu.live_decode`): each row reads the KV blocks of its
left-padded prompt and response so far, not the call's whole window.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax import backends, distributed
from graft_jax.models.decoder import init_model
from graft_jax.rollout.decode_weights import decoding_weights
from graft_jax.rollout.kv_budget import bucket, call_plan, kv_bytes_per_prompt
from graft_jax.rollout.sampler import generate_padded
from graft_jax.rollout.types import RolloutBatch, SamplingParams, check_generate_args


class JaxSamplerEngine:
  """Samples with a `graft_jax.models.Decoder`; satisfies `RolloutEngine`.

  Args:
    model: the decoder (its compute dtype is the sampler's).
    eos_ids: token id(s) that end a response.
    pad_id: id written after a response ends.
    min_prompt_bucket / min_new_bucket / min_batch_bucket: smallest bucket sizes.
    cache_dtype: KV-cache dtype (default: the model's compute dtype).
    state_sharding: optional pytree of shardings to place the weights with.
    mesh: optional mesh whose batch axes split the prompts (`max_kv_bytes` is then
      per device); over several devices the decode step keeps XLA's attention.
    max_kv_bytes: KV-cache bytes one call may hold, and the calls in flight together
      (None: the model's `kv_cache_bytes` memory option; 0: no limit).
    streams: up to how many calls, of a power of two of prompts each, run side by
      side, each from its own host thread (None: `graft_jax.backends.sampler_streams()`); a call keeps
      at least `min_stream_rows` rows. Without a mesh only: a sharded call already
      spreads its rows over the devices.
    decode_attention: how a decode step attends (`graft_jax.models.Decoder.set_decode_attention`);
      None: the model's setting, whose 'auto' on one GPU is the live-span kernel
      (`graft_jax.backends.live_decode_by_default`) where every window is whole blocks
      of 16 slots (both minimum buckets multiples of 16). Over several devices: XLA's.
  """

  def __init__(self, model, *, eos_ids: int | Sequence[int], pad_id: int,
               min_prompt_bucket: int = 16, min_new_bucket: int = 16,
               min_batch_bucket: int = 1, cache_dtype=None, state_sharding=None,
               max_kv_bytes: int | None = None, mesh=None, streams: int | None = None,
               min_stream_rows: int = 64, decode_attention: str | None = None):
    self.eos_ids = tuple(int(e) for e in np.atleast_1d(eos_ids))
    if not self.eos_ids:
      raise ValueError("JaxSamplerEngine needs at least one EOS id")
    self.pad_id = int(pad_id)
    self.min_prompt_bucket = min_prompt_bucket
    self.min_new_bucket = min_new_bucket
    self.min_batch_bucket = min_batch_bucket
    self.cache_dtype = cache_dtype
    self.state_sharding = state_sharding
    self.mesh = mesh
    self.row_shards = 1
    if mesh is not None:
      from graft_jax.sharding import batch_shards  # pylint: disable=import-outside-toplevel
      self.row_shards = batch_shards(mesh)
    self.model_cfg = model.cfg
    self.dtype = model.dtype  # the sampling dtype: the weights are cast to it per call
    self.kv_itemsize = jnp.dtype(cache_dtype or model.dtype).itemsize
    self.max_kv_bytes = int(model.kv_cache_bytes if max_kv_bytes is None else max_kv_bytes)
    self.streams = backends.sampler_streams() if streams is None else int(streams)
    if self.streams < 1:
      raise ValueError(f"JaxSamplerEngine: streams must be >= 1, got {self.streams}")
    if mesh is not None:
      self.streams = 1
    self.min_stream_rows = int(min_stream_rows)
    self.decode_attention = decode_attention
    self._compiled = set()  # call shapes this engine has run once already
    self.set_weights(model)

  def set_weights(self, model) -> None:
    """Uses `model`'s weights from now on: an nnx decoder, or its `nnx.State`.

    Only the state is replaced; the compiled programs are reused as long as
    the parameter shapes and dtypes stay the same.
    """
    if isinstance(model, nnx.Module):
      self.graphdef, state = nnx.split(model)
      self.vocab_size = model.cfg.vocab_size
      impl = self._resolve_decode_attention(model.decode_attention)
      if impl != model.decode_attention:
        copy = nnx.merge(self.graphdef, state)  # the caller's model is left as it is
        copy.set_decode_attention(impl)
        self.graphdef = nnx.split(copy)[0]
      self.decode_attention = impl
    else:
      state = model
    if self.state_sharding is not None:
      state = jax.device_put(state, self.state_sharding)
    self.state = state

  def _devices(self) -> int:
    """How many devices the sampler's rows or weights are spread over."""
    sets = [s.device_set for s in jax.tree.leaves(self.state_sharding)
            if isinstance(s, jax.sharding.Sharding)]
    return max([len(d) for d in sets] + [self.mesh.size if self.mesh is not None else 1])

  def _resolve_decode_attention(self, model_impl: str) -> str:
    """The decode attention this sampler traces: the one asked for (else the model's),
    XLA's over several devices (the CPU kernel runs whole rows on one device and the
    live kernel is a per-row program, neither with a rule for splitting rows over the
    mesh), and on one GPU or TPU the live-span kernel for 'auto' where every call's
    window, the prompt bucket + the new-token bucket, is whole kernel blocks
    (`graft_jax.backends.live_decode_granule`)."""
    impl = self.decode_attention or model_impl
    if self._devices() > 1:
      if impl == "kernel":
        raise ValueError(f"decode_attention='kernel' runs on one device; this sampler is "
                         f"sharded over {self._devices()}")
      return "xla"
    granule = backends.live_decode_granule()
    whole_blocks = self.min_prompt_bucket % granule == 0 and self.min_new_bucket % granule == 0
    if impl == "auto" and whole_blocks and backends.live_decode_by_default():
      return "live"
    return impl

  def generate(self, prompts: Sequence[Sequence[int]], n: int,
               params: SamplingParams) -> RolloutBatch:
    """Samples `n` responses per token-id prompt; see `RolloutBatch` for the fields."""
    check_generate_args(prompts, n)
    num = len(prompts)
    l_bucket = bucket(max(len(p) for p in prompts), self.min_prompt_bucket)
    n_bucket = bucket(params.max_new_tokens, self.min_new_bucket)
    per_prompt = kv_bytes_per_prompt(self.model_cfg, n=n, slots=l_bucket + n_bucket,
                                     itemsize=self.kv_itemsize)
    streams = max(1, min(self.streams, bucket(num, self.min_batch_bucket) * n
                         // max(1, self.min_stream_rows)))
    plan = lambda k: call_plan(num, per_prompt, self.max_kv_bytes, row_shards=self.row_shards,
                               min_bucket=self.min_batch_bucket, streams=k)
    p_bucket, chunk = plan(streams)
    # The calls in flight hold at most the cache of the one call streams = 1 makes.
    side_by_side = min(streams, plan(1)[1] // chunk)
    ids = np.full((p_bucket, l_bucket), self.pad_id, np.int32)
    mask = np.zeros((p_bucket, l_bucket), bool)
    for i, p in enumerate(prompts):
      ids[i, l_bucket - len(p):] = p
      mask[i, l_bucket - len(p):] = True
    greedy = params.temperature == 0
    valid = np.arange(p_bucket) < num

    state = self.decoding_state()

    def call(start: int):
      part = slice(start, start + chunk)
      args, kw = self.call_args(state, ids[part], mask[part], valid[part], params, n=n,
                                max_new=n_bucket, row_offset=start * n, total_rows=p_bucket * n)
      return generate_padded(*args, **kw)

    starts = list(range(0, num, chunk))  # chunks of only filler prompts are skipped
    side_by_side = min(side_by_side, len(starts))
    shape = (chunk, l_bucket, n, n_bucket, greedy, params.top_k, params.top_p < 1.0)
    outs = []
    # A thread holds its call until the call has run, so the calls run side by side.
    run_whole = lambda start: jax.block_until_ready(call(start))
    if side_by_side > 1 and shape not in self._compiled:
      outs.append(run_whole(starts.pop(0)))  # compiles once, before the threads would race to
    self._compiled.add(shape)
    if side_by_side > 1 and starts:
      with concurrent.futures.ThreadPoolExecutor(side_by_side) as pool:
        outs += list(pool.map(run_whole, starts))
    else:
      outs += [call(start) for start in starts]
    rows, steps = num * n, params.max_new_tokens
    fetch = jax.device_get if self.mesh is None else lambda t: jax.tree.map(distributed.to_host, t)
    tokens, logp, lengths, finished = (np.concatenate(x) for x in zip(*fetch(
        [(o.tokens_BxN, o.logp_BxN, o.lengths_B, o.finished_B) for o in outs])))
    lengths = np.asarray(lengths[:rows])
    mask_BxL = np.arange(steps)[None, :] < lengths[:, None]
    return RolloutBatch(
        tokens_BxL=np.asarray(tokens[:rows, :steps], np.int32),
        mask_BxL=mask_BxL,
        logp_BxL=np.where(mask_BxL, logp[:rows, :steps], 0.0).astype(np.float32),
        finished_B=np.asarray(finished[:rows], bool),
        truncated_B=~np.asarray(finished[:rows], bool),
        prompt_index_B=np.repeat(np.arange(num, dtype=np.int32), n),
        n=n)

  def call_args(self, state, ids_PxL, mask_PxL, valid_P, params: SamplingParams, *, n: int,
                max_new: int, row_offset: int, total_rows: int) -> tuple[tuple, dict]:
    """The arguments of one `generate_padded` call over these prompt rows (``ids_PxL``,
    ``mask_PxL``, ``valid_P``: host arrays, or abstract ones for a planner that lowers
    the program, `graft_jax.plan.lowering`), its first row ``row_offset`` of a call of
    ``total_rows``: (positional, keyword)."""
    greedy = params.temperature == 0
    return ((self.graphdef, state, *map(self._rows, (ids_PxL, mask_PxL, valid_P)),
             jax.random.key(params.seed), jnp.int32(params.max_new_tokens),
             jnp.float32(params.temperature if not greedy else 1.0), jnp.float32(params.top_p),
             jnp.int32(row_offset)),
            dict(n=n, max_new=max_new, eos_ids=self.eos_ids, pad_id=self.pad_id, greedy=greedy,
                 top_k=0 if greedy else min(params.top_k, self.vocab_size),
                 use_top_p=not greedy and params.top_p < 1.0, cache_dtype=self.cache_dtype,
                 total_rows=total_rows))

  def decoding_state(self):
    """The weights one `generate` decodes from: in the sampling dtype, and gathered
    out of the batch axes (data, fsdp) they are sharded over, if any
    (`graft_jax.rollout.decode_weights`)."""
    from graft_jax.sharding import LogicalRules  # pylint: disable=import-outside-toplevel
    return decoding_weights(self.state, self.dtype, LogicalRules().table["batch"])

  def timed_generate(self, prompts: Sequence[Sequence[int]], n: int,
                     params: SamplingParams) -> tuple[RolloutBatch, float]:
    """`generate` twice: the first compiles (a warm-up), the second is timed.
    Returns (the second's batch, its wall seconds, responses fetched to the host)."""
    self.generate(prompts, n, params)
    start = time.perf_counter()
    batch = self.generate(prompts, n, params)
    return batch, time.perf_counter() - start

  @classmethod
  def from_random(cls, model_cfg, *, dtype=jnp.bfloat16, seed: int = 0, **engine_kw):
    """An engine over a decoder with random weights (`graft_jax.models.init_model`)
    stored and computed in ``dtype``: the sampler's speed on a model's shapes
    without its checkpoint. ``engine_kw`` are the constructor's (eos_ids and
    pad_id at least)."""
    return cls(init_model(model_cfg, rngs=nnx.Rngs(seed), param_dtype=dtype), **engine_kw)

  def _rows(self, host: np.ndarray):
    """A host array of prompt rows, split over the mesh's batch axes (as is without one)."""
    if self.mesh is None:
      return host
    from graft_jax.sharding import batch_sharding  # pylint: disable=import-outside-toplevel
    return distributed.to_global(host, batch_sharding(self.mesh, ndim=host.ndim))
