"""Continuous batching: a fixed pool of decode slots fed from a queue of requests.

Request ``r`` is sample ``r % n`` of prompt ``r // n``. Each loop iteration
first refills the free slots with the next waiting requests (prefilled into
their cache rows in chunks of ``chunk`` tokens, up to ``group`` prompts of mixed
lengths in one batched pass, `prefill_rows`), then samples one token in every
busy slot and runs the new tokens through the model. A pass reads every weight
however few prompts it holds, and a full pool frees about one slot at a time, so
a device refills only once ``refill_at`` of its slots are free (or every waiting
request fits the free slots): one pass for ``refill_at`` prompts rather than one
each, for about (``refill_at`` - 1) / 2 slots idle per device while the queue
lasts. A slot whose request ends (EOS or its token budget) is free at the next
iteration, so the pool stays full until the queue is empty; the loop ends when
the queue is empty and every slot is free. A static batch instead decodes until
its longest row stops, its finished rows idle meanwhile.

Each slot row keeps its own write position: a prompt of length p sits
left-padded to the next multiple of ``chunk`` (the last prefill chunk then
ends on its last token, whose logits start the decode), and its responses'
keys follow. The model runs one row at a time under ``jax.vmap``, so every
row writes its own cache slot; the weights are shared, so the products stay
batched over the rows.

Token ``t`` of request ``r`` draws `graft_jax.rollout.sampling.uniforms_at`
under ``fold_in(key, t)`` for row ``r``, the number the static sampler
(`graft_jax.rollout.sampler`) draws for that row and step: a row's tokens do
not depend on its slot, on when it started, nor on the device it runs on.

The drain. Once the queue is empty the pool only loses rows, and a step
costs the whole pool however few are left. With ``shrinks`` > 0, whenever
the live rows fit half the pool they move into a pool of half the slots
(their cache rows and state gathered once), up to ``shrinks`` times: the
tail's steps run on smaller shapes. Each smaller size is another loop in the same
program, not another program.

On a mesh the slots are split over its batch axes (``shard_map``): each
device holds ``slots / devices`` slots and their cache rows, and runs the
model on them with the weights whole (or as the mesh's other axes split
them). The queue stays one queue: each refill gives the waiting requests to
the free slots in the order of the slots' global index (device-major), as
one device would, so with ``refill_at`` = 1 the pool decodes the schedule it
decodes on one device (with more, each device waits for its own free slots);
a shrink halves every device's share, once each device's live rows fit half
of it. Per refill and step the devices exchange their free and live slot
counts alone; each writes its requests' tokens into its copy of the outputs,
summed over the devices at the end.

One compiled program covers any prompt count, sample count and prompt
length up to its capacities (the request count, ``n`` and the chunk count
are traced): it is specialised only on the pool, the capacities (the shapes
of its inputs and outputs), the sampling flags and the mesh.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec

from graft_jax.rollout.sampling import sample_step, uniforms_at


class PoolOutput(NamedTuple):
  tokens_RxM: jax.Array        # int32, pad after the end
  logp_RxM: jax.Array          # float32, 0 after the end
  lengths_R: jax.Array         # int32 response tokens (EOS included)
  finished_R: jax.Array        # bool, ended with EOS
  iterations: jax.Array        # int32 decode steps of the pool
  busy_slot_steps: jax.Array   # int32 sum over steps of the slots decoding a request
  pool_slot_steps: jax.Array   # int32 sum over steps of the pool's slots (busy or not)
  live_kv_tokens: jax.Array    # float32 sum over steps and busy slots of the keys attended
  idle_kv_slots: jax.Array     # float32 sum over steps and free slots of the span attended
  prefill_passes: jax.Array    # int32 refill passes (a group's prompts together), most per device


class _Pool(NamedTuple):
  next_req: jax.Array      # the first request not yet admitted (the same on every device)
  req_B: jax.Array         # each slot's request (meaningless where not busy)
  step_B: jax.Array        # tokens the slot's request has sampled
  base_B: jax.Array        # cache slot of the request's first response token
  plen_B: jax.Array        # its prompt's length
  busy_B: jax.Array        # the slot holds an unfinished request
  logits_BxV: jax.Array
  kv_mask_BxS: jax.Array
  cache: tuple
  out: PoolOutput


class _Devices(NamedTuple):
  """The devices the slots are split over: the mesh axes ``axes`` (none: one device),
  ``count`` of them; their reductions, the identity on one device."""
  axes: tuple[str, ...]
  count: int

  def index(self):
    return jax.lax.axis_index(self.axes) if self.axes else 0

  def gather(self, x):
    return jax.lax.all_gather(x, self.axes) if self.axes else x[None]

  def sum(self, x):
    return jax.lax.psum(x, self.axes) if self.axes else x

  def max(self, x):
    return jax.lax.pmax(x, self.axes) if self.axes else x


def refill_shares(devices: _Devices, free, next_req, num_requests, refill_at: int):
  """(this device's first request, how many it takes, how many all take) of a refill, with
  ``free`` slots here: the waiting requests in the devices' order. A device takes any once
  ``refill_at`` of its slots are free, or when the whole queue fits the free slots."""
  free_D = devices.gather(free)
  queued = num_requests - next_req
  free_D = jnp.where((free_D >= refill_at) | (free_D.sum() >= queued), free_D, 0)
  first = next_req + jnp.cumsum(free_D)[devices.index()] - free_D[devices.index()]
  return (first, jnp.clip(num_requests - first, 0, free_D[devices.index()]),
          jnp.clip(queued, 0, free_D.sum()))


def prompt_slots(prompt_len, chunk: int):
  """Cache slots a prompt of ``prompt_len`` tokens takes: the next multiple of ``chunk``."""
  return -(-prompt_len // chunk) * chunk


def pool_sizes(slots: int, shrinks: int) -> tuple[int, ...]:
  """The pool sizes a call may run: ``slots``, then halved (rounded up) ``shrinks``
  times, stopping at one slot."""
  sizes = [slots]
  while len(sizes) <= shrinks and sizes[-1] > 1:
    sizes.append(-(-sizes[-1] // 2))
  return tuple(sizes)


def _row(tree, i):
  return jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=True), tree)


def _set_row(tree, rows, i):
  return jax.tree.map(lambda x, r: jax.lax.dynamic_update_index_in_dim(x, r, i, 0), tree, rows)


def prefill_rows(model, prompts_GxL, prompt_len_G, cache_rows, *, chunk: int, pad_id: int):
  """Runs G prompts (left-aligned in ``prompts_GxL``) through the model together in
  chunks into a G-row cache, each left-padded to its `prompt_slots`. Returns
  (last_logits_GxV, cache_rows, kv_mask_GxS).

  Chunk c of every row is written at slots [c * chunk, (c + 1) * chunk), so the rows
  share one write index however their lengths differ; the pass runs the longest
  row's chunk count. A row past its last chunk runs pad tokens at position 0 (finite
  keys) into slots past its prompt, which its mask hides and its decode overwrites
  before reading; its logits are those of its own last chunk."""
  s = cache_rows[0][0].shape[-1]
  width_G = prompt_slots(prompt_len_G, chunk)
  offset_G = width_G - prompt_len_G
  slot_S = jnp.arange(s)
  kv_mask_GxS = (slot_S[None] >= offset_G[:, None]) & (slot_S[None] < width_G[:, None])
  last = prompts_GxL.shape[1] - 1

  def one_chunk(c, carry):
    logits_GxV, cache = carry
    slot_C = c * chunk + jnp.arange(chunk)
    idx_GxC = slot_C[None] - offset_G[:, None]
    live_GxC = (idx_GxC >= 0) & (slot_C[None] < width_G[:, None])
    ids_GxC = jnp.where(live_GxC, jnp.take_along_axis(prompts_GxL, jnp.clip(idx_GxC, 0, last),
                                                      axis=1), pad_id)
    chunk_logits_Gx1xV, cache = model.forward_cached(
        ids_GxC, jnp.where(live_GxC, idx_GxC, 0), kv_mask_GxS, cache, c * chunk, last_only=True)
    ends_G = (c + 1) * chunk == width_G
    return jnp.where(ends_G[:, None], chunk_logits_Gx1xV[:, 0], logits_GxV), cache

  logits_GxV = jnp.zeros((prompts_GxL.shape[0], model.cfg.vocab_size), jnp.float32)
  logits_GxV, cache_rows = jax.lax.fori_loop(0, width_G.max() // chunk, one_chunk,
                                             (logits_GxV, cache_rows))
  return logits_GxV, cache_rows, kv_mask_GxS


def decode_rows(model, token_B, position_B, kv_mask_BxS, cache, index_B):
  """One decode step with a write slot per row: each row's key and value go to its
  ``index_B`` slot. Returns (logits_BxV, cache)."""

  def one(token, position, kv_mask_S, cache_row, index):
    add = lambda x: x[None]
    logits_1x1xV, cache_row = model.forward_cached(
        token[None, None], position[None, None], kv_mask_S[None], jax.tree.map(add, cache_row),
        index)
    return logits_1x1xV[0, 0], jax.tree.map(lambda x: x[0], cache_row)

  return jax.vmap(one)(token_B, position_B, kv_mask_BxS, cache, index_B)


def _compact(pool: _Pool, size: int) -> _Pool:
  """The busy slots (at most ``size``) moved, in slot order, into a pool of ``size``."""
  keep_K = jnp.argsort((~pool.busy_B).astype(jnp.int32), stable=True)[:size]
  take = lambda x: jnp.take(x, keep_K, axis=0)
  return pool._replace(req_B=take(pool.req_B), step_B=take(pool.step_B),
                       base_B=take(pool.base_B), plen_B=take(pool.plen_B),
                       busy_B=take(pool.busy_B), logits_BxV=take(pool.logits_BxV),
                       kv_mask_BxS=take(pool.kv_mask_BxS), cache=jax.tree.map(take, pool.cache))


@functools.partial(jax.jit, static_argnames=(
    "graphdef", "slots", "max_new", "chunk", "group", "eos_ids", "pad_id", "greedy", "top_k",
    "use_top_p", "cache_dtype", "refill", "refill_at", "shrinks", "mesh", "batch_axes"))
def run_pool(graphdef, state, prompts_PxL, prompt_len_P, num_requests, n, budget_R, key,
             temperature, top_p, *, slots: int, max_new: int, chunk: int, group: int,
             eos_ids: tuple[int, ...], pad_id: int, greedy: bool, top_k: int, use_top_p: bool,
             cache_dtype=None, refill: bool = True, refill_at: int = 1, shrinks: int = 0,
             mesh=None, batch_axes: tuple[str, ...] = ()) -> PoolOutput:
  """Samples the first ``num_requests`` (traced) requests in a pool of ``slots``,
  request r being sample ``r % n`` (``n`` traced) of prompt ``r // n``.

  ``prompts_PxL`` holds each prompt left-aligned, ``prompt_len_P`` their lengths
  (at most L, a multiple of ``chunk``); request r may sample up to
  ``budget_R[r]`` (<= ``max_new``) tokens; R bounds ``num_requests``. Cache rows
  hold L + max_new slots. A refill prefills up to ``group`` prompts together; a device
  refills once ``refill_at`` of its slots are free (or the queue fits the free slots).
  Without ``refill`` requests enter only when every slot is free: a static batch of
  ``slots`` rows that decodes until its longest row stops, on the same counters.
  ``shrinks``: how many times the drain may halve the pool. With a ``mesh``, the
  slots are split over its ``batch_axes`` (``slots`` a multiple of their size).
  """
  args = (state, prompts_PxL, prompt_len_P, num_requests, n, budget_R, key, temperature, top_p)
  kw = dict(max_new=max_new, chunk=chunk, group=group, eos_ids=eos_ids, pad_id=pad_id,
            greedy=greedy, top_k=top_k, use_top_p=use_top_p, cache_dtype=cache_dtype,
            refill=refill, refill_at=refill_at, shrinks=shrinks)
  if mesh is None or not batch_axes:
    return _pool(graphdef, *args, devices=_Devices((), 1), slots=slots, **kw)
  count = 1
  for a in batch_axes:
    count *= mesh.shape[a]
  body = functools.partial(_pool, graphdef, devices=_Devices(tuple(batch_axes), count),
                           slots=slots // count, **kw)
  # Every input and output whole on every device; the slots split inside.
  return jax.shard_map(body, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(),
                       check_vma=False)(*args)


def _pool(graphdef, state, prompts_PxL, prompt_len_P, num_requests, n, budget_R, key,
          temperature, top_p, *, devices: _Devices, slots: int, max_new: int, chunk: int,
          group: int,
          eos_ids: tuple[int, ...], pad_id: int, greedy: bool, top_k: int, use_top_p: bool,
          cache_dtype, refill: bool, refill_at: int, shrinks: int) -> PoolOutput:
  """`run_pool` on one device's ``slots`` slots, the queue shared with ``devices``."""
  model = nnx.merge(graphdef, state)
  r = budget_R.shape[0]
  group = min(group, slots)
  width = prompts_PxL.shape[1] + max_new
  eos_E = jnp.asarray(eos_ids, jnp.int32)
  zeros = lambda dt: jnp.zeros((slots,), dt)
  # Each device writes only its requests' entries: zeros elsewhere, summed at the end.
  out = PoolOutput(jnp.zeros((r, max_new), jnp.int32), jnp.zeros((r, max_new), jnp.float32),
                   jnp.zeros((r,), jnp.int32), jnp.zeros((r,), jnp.int32), jnp.int32(0),
                   jnp.int32(0), jnp.int32(0), jnp.float32(0), jnp.float32(0), jnp.int32(0))
  init = _Pool(jnp.int32(0), zeros(jnp.int32), zeros(jnp.int32), zeros(jnp.int32),
               zeros(jnp.int32), zeros(bool),
               jnp.zeros((slots, model.cfg.vocab_size), jnp.float32),
               jnp.zeros((slots, width), bool), model.init_cache(slots, width, cache_dtype), out)

  def admit(group, first, take, pool: _Pool) -> _Pool:
    """Requests [first, first + take) (``take`` <= ``group``) into this device's first
    free slots, in slot order, prefilled together."""
    valid_G = jnp.arange(group) < take
    free_G = jnp.argsort(pool.busy_B.astype(jnp.int32), stable=True)[:group]
    slot_G = jnp.where(valid_G, free_G, slots)  # slots: out of bounds, dropped
    req_G = first + jnp.arange(group)
    # A row past ``take`` runs a one-chunk prompt whose results are dropped.
    prompt_G = jnp.minimum(req_G, num_requests - 1) // n
    plen_G = jnp.where(valid_G, prompt_len_P[prompt_G], 1)
    logits_GxV, cache_rows, kv_mask_GxS = prefill_rows(
        model, prompts_PxL[prompt_G], plen_G, jax.tree.map(lambda x: x[free_G], pool.cache),
        chunk=chunk, pad_id=pad_id)
    put = lambda x_B, v_G: x_B.at[slot_G].set(v_G, mode="drop")
    return pool._replace(
        req_B=put(pool.req_B, req_G), step_B=put(pool.step_B, jnp.zeros_like(req_G)),
        base_B=put(pool.base_B, prompt_slots(plen_G, chunk)), plen_B=put(pool.plen_B, plen_G),
        busy_B=put(pool.busy_B, valid_G), logits_BxV=put(pool.logits_BxV, logits_GxV),
        kv_mask_BxS=put(pool.kv_mask_BxS, kv_mask_GxS),
        cache=jax.tree.map(put, pool.cache, cache_rows))

  def refill_slots(pool: _Pool) -> _Pool:
    """The waiting requests into the free slots, in the order of the slots' global index,
    ``group`` at a time (a lone one alone)."""
    first, take, admitted = refill_shares(devices, slots - pool.busy_B.sum(dtype=jnp.int32),
                                          pool.next_req, num_requests, min(refill_at, slots))
    if not refill:  # a static batch fills an empty pool
      opens = devices.sum(pool.busy_B.sum(dtype=jnp.int32)) == 0
      take, admitted = jnp.where(opens, take, 0), jnp.where(opens, admitted, 0)
    def admit_next(c):
      # A lone request (most refills of a full pool) is prefilled alone: a group's pass
      # would compute ``group`` prompts for it. Both passes are in the one program.
      done, pool = c
      left = take - done
      pool = jax.lax.cond(left > 1,
                          lambda p: admit(group, first + done, jnp.minimum(left, group), p),
                          lambda p: admit(1, first + done, jnp.minimum(left, 1), p), pool)
      out = pool.out._replace(prefill_passes=pool.out.prefill_passes + 1)
      return done + jnp.where(left > 1, group, 1), pool._replace(out=out)

    _, pool = jax.lax.while_loop(lambda c: c[0] < take, admit_next, (jnp.int32(0), pool))
    return pool._replace(next_req=pool.next_req + admitted)

  def step(pool: _Pool, size: int) -> _Pool:
    """One token in every busy slot of a pool of ``size``, and the new tokens through
    the model."""
    busy_B = pool.busy_B
    uniforms_B = jax.vmap(lambda t, row: uniforms_at(jax.random.fold_in(key, t), row[None])[0])(
        pool.step_B, pool.req_B)
    token_B, logp_B = sample_step(key, pool.logits_BxV, temperature, top_p, greedy=greedy,
                                  top_k=top_k, use_top_p=use_top_p, uniforms_B=uniforms_B)
    token_B = jnp.where(busy_B, token_B, pad_id)
    req_B = jnp.where(busy_B, pool.req_B, r)  # r: out of bounds, dropped by the scatters
    o = pool.out
    tokens_RxM = o.tokens_RxM.at[req_B, pool.step_B].set(token_B, mode="drop")
    logp_RxM = o.logp_RxM.at[req_B, pool.step_B].set(logp_B, mode="drop")
    step_B = pool.step_B + busy_B.astype(jnp.int32)
    eos_B = jnp.isin(token_B, eos_E)
    ends_B = busy_B & (eos_B | (step_B >= budget_R[jnp.minimum(req_B, r - 1)]))
    ended_R = jnp.where(ends_B, req_B, r)
    # A free slot's row runs too (the shapes are fixed); it writes at the last slot,
    # position 0, inside the window (past it RoPE is NaN), and nothing reads it. It
    # attends to that slot alone: its old request's mask would span the window from that
    # prompt's first slot (a live-span kernel reading every block of it), and a never
    # admitted slot's empty mask leaves its softmax nothing to normalise.
    index_B = jnp.where(busy_B, pool.base_B + pool.step_B, width - 1)
    write_BxS = jnp.arange(width)[None] == index_B[:, None]
    kv_mask_BxS = jnp.where(busy_B[:, None], pool.kv_mask_BxS | write_BxS, write_BxS)
    logits_BxV, cache = decode_rows(model, token_B, jnp.where(busy_B, pool.plen_B + pool.step_B, 0),
                                    kv_mask_BxS, pool.cache, index_B)
    out = PoolOutput(
        tokens_RxM, logp_RxM, o.lengths_R.at[ended_R].set(step_B, mode="drop"),
        o.finished_R.at[ended_R].set(eos_B.astype(jnp.int32), mode="drop"), o.iterations + 1,
        o.busy_slot_steps + busy_B.sum(dtype=jnp.int32),
        o.pool_slot_steps + size * devices.count,
        o.live_kv_tokens + jnp.where(busy_B, pool.plen_B + step_B, 0).sum(dtype=jnp.float32),
        o.idle_kv_slots + jnp.where(busy_B, 0, index_B + 1 - jnp.argmax(kv_mask_BxS, axis=1)).sum(
            dtype=jnp.float32), o.prefill_passes)
    return pool._replace(step_B=step_B, busy_B=busy_B & ~ends_B, logits_BxV=logits_BxV,
                         kv_mask_BxS=kv_mask_BxS, cache=cache, out=out)

  live = lambda pool: pool.busy_B.sum(dtype=jnp.int32)
  queued = lambda pool: pool.next_req < num_requests
  more = lambda pool: queued(pool) | (devices.sum(live(pool)) > 0)
  sizes = pool_sizes(slots, shrinks)
  pool = init
  for k, size in enumerate(sizes):
    if k:
      pool = _compact(pool, size)
    if k + 1 < len(sizes):
      half = sizes[k + 1]
      fits = lambda pool, half=half: ~queued(pool) & (devices.max(live(pool)) <= half)
      goes_on = lambda pool, fits=fits: more(pool) & ~fits(pool)
    else:
      goes_on = more
    # The queue is empty by the first shrink: the smaller pools only decode.
    body = (lambda pool: step(refill_slots(pool), slots)) if k == 0 else functools.partial(
        step, size=size)
    pool = jax.lax.while_loop(goes_on, body, pool)
  o = pool.out
  lengths_R = devices.sum(o.lengths_R)
  written_RxM = jnp.arange(max_new)[None] < lengths_R[:, None]
  return PoolOutput(jnp.where(written_RxM, devices.sum(o.tokens_RxM), pad_id),
                    devices.sum(o.logp_RxM), lengths_R, devices.sum(o.finished_R) > 0,
                    o.iterations, devices.sum(o.busy_slot_steps), o.pool_slot_steps,
                    devices.sum(o.live_kv_tokens), devices.sum(o.idle_kv_slots),
                    devices.max(o.prefill_passes))
