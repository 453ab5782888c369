"""How many prompts the JAX sampler decodes at once under a KV-cache byte budget.

A call of P prompts x n samples, prompts padded to L tokens and up to M new
tokens, holds per layer keys and values of every row over S = L + M slots:

.. math::
    \\text{bytes}(P) = P\\,(n + 1)\\; 2\\, N_\\text{layers}\\, K\\, H\\, S \\cdot \\text{itemsize},

the ``+ 1`` being the prefilled cache of each prompt, alive while it is
repeated into its n rows (``graft_jax.rollout.sampler.generate_padded``).
"""

from __future__ import annotations


def bucket(size: int, minimum: int) -> int:
  """The next power of two >= size (and >= minimum)."""
  return max(minimum, 1 << max(0, int(size) - 1).bit_length())


class KVBudgetError(ValueError):
  """Not even one prompt's KV cache fits the budget."""


def kv_bytes_per_row(model_cfg, *, slots: int, itemsize: int) -> int:
  """KV-cache bytes of one decode row over ``slots`` positions (keys and values, every layer)."""
  return 2 * model_cfg.num_layers * model_cfg.num_kv_heads * model_cfg.head_dim * slots * itemsize


def pool_prompt_width(longest_prompt: int, chunk: int) -> int:
  """The prompt part of a slot-pool row's window for a call whose longest prompt has
  ``longest_prompt`` tokens: its power-of-two bucket, rounded up to whole prefill
  chunks. A call of short prompts holds a short window; the buckets bound the
  programs compiled (one per bucket)."""
  return -(-bucket(longest_prompt, 1) // chunk) * chunk


def pool_window(longest_prompt: int, max_new: int, *, chunk: int, granule: int) -> int:
  """Cache positions of one slot-pool row: the prompt part (`pool_prompt_width`) plus
  ``max_new`` rounded up to a power of two >= ``granule``."""
  return pool_prompt_width(longest_prompt, chunk) + bucket(max_new, granule)


def pool_cache_bytes(model_cfg, *, slots: int, window: int, itemsize: int, shrinks: int) -> int:
  """Peak KV bytes of a slot pool of ``slots`` rows over ``window`` positions. At its
  first shrink (``shrinks`` > 0) the half-size pool is gathered while the full one
  is alive, so the peak is the full cache plus its half (rounded up)."""
  half = -(-slots // 2) if shrinks and slots > 1 else 0
  return (slots + half) * kv_bytes_per_row(model_cfg, slots=window, itemsize=itemsize)


def kv_bytes_per_prompt(model_cfg, *, n: int, slots: int, itemsize: int) -> int:
  """KV-cache bytes of one prompt's n rows (plus its prefill) over ``slots`` positions."""
  return (n + 1) * kv_bytes_per_row(model_cfg, slots=slots, itemsize=itemsize)


def prompts_per_chunk(num_prompts: int, per_prompt: int, budget: int) -> int:
  """The largest power of two of prompts whose caches fit ``budget`` bytes (at most
  ``num_prompts``, itself a power of two); 0 = no budget, all at once.

  Raises `KVBudgetError` when one prompt alone does not fit.
  """
  if budget <= 0 or per_prompt * num_prompts <= budget:
    return num_prompts
  if per_prompt > budget:
    raise KVBudgetError(
        f"JAX sampler: one prompt's KV cache needs {per_prompt / 2**30:.2f} GiB but "
        f"perf.sampler_max_kv_bytes is {budget / 2**30:.2f} GiB; raise the budget, shorten "
        f"max_prompt_len / max_response_len or n, or sample with the vLLM engine "
        f"(--config.engine=vllm)")
  return 1 << ((budget // per_prompt).bit_length() - 1)


def call_plan(num_prompts: int, per_prompt: int, budget: int, *, row_shards: int = 1,
              min_bucket: int = 1, streams: int = 1) -> tuple[int, int]:
  """(prompt bucket, prompts per compiled call) of one sampler call of ``num_prompts``.

  The bucket is the next power of two >= num_prompts (and >= min_bucket and
  row_shards), then a multiple of row_shards: with the rows split over
  ``row_shards`` devices each holds ``prompts per call / row_shards`` prompts' caches,
  so ``budget`` is per device. A call is at least one prompt per device; the bucket
  grows to a multiple of it (only where row_shards is not a power of two).
  With ``streams`` > 1 the bucket is split into at least that many calls (of a
  power of two of prompts each), to run side by side; the caller runs at most
  as many at once as fit in the one call ``streams`` = 1 would make, so the calls
  in flight hold no more cache than it does.
  """
  if budget > 0:
    prompts_per_chunk(1, per_prompt, budget)  # raises when one prompt exceeds a device's budget
  p_bucket = bucket(num_prompts, max(min_bucket, row_shards))
  p_bucket = -(-p_bucket // row_shards) * row_shards
  chunk = prompts_per_chunk(p_bucket, per_prompt, budget * row_shards)
  split = max(1, p_bucket // max(1, streams))
  chunk = min(chunk, 1 << (split.bit_length() - 1))  # a power of two
  chunk = max(row_shards, chunk // row_shards * row_shards)
  return -(-p_bucket // chunk) * chunk, chunk
