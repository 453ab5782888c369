"""The compiled sampler: prefill left-padded prompts once, then a KV-cached decode loop.

Prompts are left-padded so every row's next token lands in the same cache
slot, which keeps each decode step a single in-place `dynamic_update_slice`.
Each prompt is prefilled once and its cache repeated `n` times (row `i * n + j`)
into the call's decode cache, allocated once at its final size (prompt_len +
max_new slots) before the loop; the loop is one `lax.while_loop` that stops
when every row has hit EOS. XLA's decode attention reads the whole cache (a
window of it would be a copy per step, costlier than the slots it skips); the
CPU kernel, and on a GPU the live-span Pallas kernel
(`graft_jax.backends.gpu.live_decode`, `JaxSamplerEngine`'s default there),
read each row's live span only. A row that has finished attends to its
current slot alone, so the kernels skip its cache; its tokens are pad from
then on and nothing reads its logits.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from graft_jax.models.decoder import positions_from_mask
from graft_jax.rollout.sampling import sample_step


class SamplerOutput(NamedTuple):
  tokens_BxN: jax.Array   # int32, pad after the end
  logp_BxN: jax.Array     # float32, 0 after the end
  lengths_B: jax.Array    # int32 real response tokens (EOS included)
  finished_B: jax.Array   # bool, ended with EOS


class _Carry(NamedTuple):
  step: jax.Array
  tokens_BxN: jax.Array
  logp_BxN: jax.Array
  lengths_B: jax.Array
  done_B: jax.Array
  logits_BxV: jax.Array
  kv_mask_BxS: jax.Array
  cache: tuple


def prefill(model, prompt_ids_PxL, prompt_mask_PxL, max_new: int = 0, cache_dtype=None):
  """Runs the prompts through the model into a cache of length L + max_new
  (`generate_padded` prefills the L slots alone and widens the repeated cache).

  Returns (last_logits_PxV, cache, kv_mask_PxS, next_positions_P).
  """
  p, l = prompt_ids_PxL.shape
  mask_PxL = prompt_mask_PxL.astype(bool)
  cache = model.init_cache(p, l + max_new, cache_dtype)
  kv_mask_PxS = jnp.concatenate([mask_PxL, jnp.zeros((p, max_new), bool)], axis=1)
  logits_Px1xV, cache = model.forward_cached(
      prompt_ids_PxL, positions_from_mask(mask_PxL), kv_mask_PxS, cache, 0, last_only=True)
  return logits_Px1xV[:, 0], cache, kv_mask_PxS, mask_PxL.sum(axis=1).astype(jnp.int32)


def _grow(x, axis: int, size: int):
  """``x`` zero-padded at the end of ``axis`` to ``size`` entries."""
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, widths)


def decode_cache(cache, kv_mask_BxL, slots: int):
  """The prefilled cache and mask widened once to the call's ``slots``: the
  decode loop's cache, at its final size before the first step."""
  return (tuple((_grow(k, 3, slots), _grow(v, 2, slots)) for k, v in cache),
          _grow(kv_mask_BxL, 1, slots))


def attention_mask(kv_mask_BxS, done_B, slot):
  """The slots each row attends to in this step: its own (``kv_mask_BxS``), or for
  a row that is done (its logits are never read again) the current slot alone."""
  only_slot_S = jnp.arange(kv_mask_BxS.shape[1]) == slot
  return jnp.where(done_B[:, None], only_slot_S[None], kv_mask_BxS)


def decode(model, key, logits_BxV, cache, kv_mask_BxS, positions_B, done_B, *, prompt_len: int,
           max_new: int, steps, temperature, top_p, eos_ids: tuple[int, ...], pad_id: int,
           greedy: bool, top_k: int, use_top_p: bool, row_offset=0,
           total_rows: int | None = None) -> SamplerOutput:
  """Samples up to `steps` (traced, <= max_new) tokens per row, stopping early when all are done.

  These rows are rows `row_offset..` of a call of `total_rows` (None: all of
  it): each row draws the random numbers it would draw in the whole call. The
  cache and `kv_mask_BxS` come at their final size, prompt_len + max_new slots
  (`decode_cache`)."""
  b = logits_BxV.shape[0]
  eos_E = jnp.asarray(eos_ids, jnp.int32)

  def body(c: _Carry) -> _Carry:
    token_B, logp_B = sample_step(jax.random.fold_in(key, c.step), c.logits_BxV, temperature,
                                  top_p, greedy=greedy, top_k=top_k, use_top_p=use_top_p,
                                  row_offset=row_offset, total_rows=total_rows)
    live_B = ~c.done_B
    token_B = jnp.where(live_B, token_B, pad_id)
    logp_B = jnp.where(live_B, logp_B, 0.0)
    done_B = c.done_B | (live_B & jnp.isin(token_B, eos_E))
    tokens_BxN = jax.lax.dynamic_update_slice(c.tokens_BxN, token_B[:, None], (0, c.step))
    logp_BxN = jax.lax.dynamic_update_slice(c.logp_BxN, logp_B[:, None], (0, c.step))
    slot = prompt_len + c.step
    kv_mask_BxS = jax.lax.dynamic_update_slice(c.kv_mask_BxS, live_B[:, None], (0, slot))
    logits_Bx1xV, cache = model.forward_cached(
        token_B[:, None], (positions_B + c.step)[:, None],
        attention_mask(kv_mask_BxS, done_B, slot), c.cache, slot)
    return _Carry(c.step + 1, tokens_BxN, logp_BxN, c.lengths_B + live_B.astype(jnp.int32),
                  done_B, logits_Bx1xV[:, 0], kv_mask_BxS, cache)

  init = _Carry(jnp.int32(0), jnp.full((b, max_new), pad_id, jnp.int32),
                jnp.zeros((b, max_new), jnp.float32), jnp.zeros((b,), jnp.int32), done_B,
                logits_BxV.astype(jnp.float32), kv_mask_BxS, cache)
  cond = lambda c: (c.step < steps) & ~jnp.all(c.done_B)
  out = jax.lax.while_loop(cond, body, init)
  return SamplerOutput(out.tokens_BxN, out.logp_BxN, out.lengths_B, out.done_B & ~done_B)


@functools.partial(jax.jit, static_argnames=(
    "graphdef", "n", "max_new", "eos_ids", "pad_id", "greedy", "top_k", "use_top_p",
    "cache_dtype", "total_rows"))
def generate_padded(graphdef, state, prompt_ids_PxL, prompt_mask_PxL, prompt_valid_P, key,
                    steps, temperature, top_p, row_offset=0, *, n: int, max_new: int,
                    eos_ids: tuple[int, ...], pad_id: int, greedy: bool, top_k: int,
                    use_top_p: bool, cache_dtype=None,
                    total_rows: int | None = None) -> SamplerOutput:
  """Prefill + decode for P left-padded prompts, n samples each (B = P * n rows).

  Rows of prompts with `prompt_valid_P == False` (batch-bucket filler) start
  finished and produce nothing. Compiles once per (P, L, n, max_new, flags);
  new weights in `state` and new traced settings do not recompile. A chunk of
  a larger call passes its first row `row_offset` (traced) and the call's
  `total_rows`, and samples what the whole call would for its rows.
  """
  model = nnx.merge(graphdef, state)
  logits_PxV, cache, kv_mask_PxL, positions_P = prefill(
      model, prompt_ids_PxL, prompt_mask_PxL, cache_dtype=cache_dtype)
  rep = lambda x: jnp.repeat(x, n, axis=0)
  cache, kv_mask_BxS = decode_cache(jax.tree.map(rep, cache), rep(kv_mask_PxL),
                                    prompt_ids_PxL.shape[1] + max_new)
  return decode(model, key, rep(logits_PxV), cache, kv_mask_BxS,
                rep(positions_P), rep(~prompt_valid_P.astype(bool)),
                prompt_len=prompt_ids_PxL.shape[1], max_new=max_new, steps=steps,
                temperature=temperature, top_p=top_p, eos_ids=eos_ids, pad_id=pad_id,
                greedy=greedy, top_k=top_k, use_top_p=use_top_p, row_offset=row_offset,
                total_rows=total_rows)
