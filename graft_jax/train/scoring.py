"""Teacher-forced log-probs of many ragged (prompt, response) rows, in chunks of bounded size."""

from __future__ import annotations

import numpy as np

from graft_jax.models import pack_pairs, token_logprobs_jit
from graft_jax.models.logprobs import bucket_length, row_shards


def score_rows(model, prompts, responses, pad_id: int, *, chunk_rows: int = 64,
               temperature: float = 1.0, length_cap: int = 0,
               token_budget: int | None = None, min_length: int = 0) -> list[np.ndarray]:
  """Per row, log pi(response_t | prompt, response_<t) as a float32 array.

  Chunks are padded to ``chunk_rows`` rows (dummy one-token prompts) and
  lengths to ``bucket_length(longest row, length_cap)`` (``length_cap``: the
  run's ``max_prompt_len + max_response_len``), so the compiled scorer is
  reused across steps. With a ``token_budget`` (default: the model's
  ``score_tokens`` memory option, the run's ``perf.micro_batch_tokens``; 0 = none)
  each device's share of a chunk is the largest power of two of rows that fits
  it at the bucketed length of the longest row (at least one row). On a mesh the
  rows of a chunk are split over its batch axes (``row_shards`` parts, each
  device scoring its own share), and ``chunk_rows`` bounds the rows of a chunk
  over all devices. Each row's values are the same as without a budget or a mesh. An empty response gives an empty array.
  ``min_length`` shapes the chunks as if a row had that many tokens (a subset of
  a batch scored at the whole batch's shapes, so no new program compiles).
  """
  budget = getattr(model, "score_tokens", 0) if token_budget is None else token_budget
  shards = row_shards(model)
  per_device = max(1, chunk_rows // shards)
  if budget and len(prompts):
    longest = max([len(p) + len(r) for p, r in zip(prompts, responses)] + [min_length])
    fit = max(1, budget // bucket_length(longest, length_cap))
    per_device = min(per_device, 1 << (fit.bit_length() - 1))
  # Each device scores `per_device` rows of every chunk (`token_logprobs_jit` splits
  # the rows over the mesh's batch axes).
  chunk_rows = per_device * shards
  out: list[np.ndarray] = []
  for start in range(0, len(prompts), chunk_rows):
    ps = [list(p) for p in prompts[start:start + chunk_rows]]
    rs = [list(r) for r in responses[start:start + chunk_rows]]
    real = len(ps)
    ps += [[pad_id]] * (chunk_rows - real)
    rs += [[]] * (chunk_rows - real)
    length = bucket_length(max([len(p) + len(r) for p, r in zip(ps, rs)] + [min_length]),
                           length_cap)
    packed = pack_pairs(ps, rs, pad_id, multiple=length)
    logp = np.asarray(token_logprobs_jit(model, packed.ids_BxT, packed.attn_mask_BxT,
                                         temperature=temperature))
    out += [x.astype(np.float32) for x in packed.responses(logp)[:real]]
  return out


def mean_or_nan(values: np.ndarray) -> float:
  """Mean of a row's log-probs; NaN for an empty row (the gate drops it)."""
  return float(np.mean(values)) if len(values) else float("nan")
