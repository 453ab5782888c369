"""Teacher-forced log-probs of many ragged (prompt, response) rows, packed into calls of one shape."""

from __future__ import annotations

import numpy as np

from graft_jax.models import token_logprobs_jit
from graft_jax.models.logprobs import row_shards
from graft_jax.outputs import step_metrics
from graft_jax.packing import sequence_packing


def score_rows(model, prompts, responses, pad_id: int, *, chunk_rows: int = 64,
               temperature: float = 1.0, length_cap: int = 0,
               token_budget: int | None = None, min_length: int = 0) -> list[np.ndarray]:
  """Per row, log pi(response_t | prompt, response_<t) as a float32 array.

  The (prompt + response) sequences are packed whole into rows of
  `sequence_packing.packed_row_length` (``length_cap``, the run's ``max_prompt_len
  + max_response_len``, or with none the longest sequence or ``min_length``),
  several per row, each attending within itself (segment ids), so the scorer
  computes little padding. Each call takes the same number of rows: per device,
  as many as fit a ``token_budget`` (default: the model's ``score_tokens`` memory
  option, the run's ``perf.micro_batch_tokens``; 0 = none), at least one, at most
  ``chunk_rows`` over all devices; so a run compiles one scoring program (two if
  a sequence outgrows the cap), whatever the lengths. On a mesh each call's rows
  are split over its batch axes (``row_shards`` parts). Each call's log-probs come
  back to the host in one transfer. Each row's values are the same as scored
  alone. An empty response gives an empty array.
  """
  if any(len(p) == 0 for p in prompts):
    raise ValueError("score_rows: empty prompt (the first response token needs context)")
  budget = getattr(model, "score_tokens", 0) if token_budget is None else token_budget
  shards = row_shards(model)
  seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
  lengths = [len(s) for s in seqs]
  row_length = sequence_packing.packed_row_length(
      length_cap or max(lengths + [min_length, 1]))
  most = max(1, chunk_rows // shards)
  per_device = min(sequence_packing.rows_per_call(budget, row_length, most), most)
  rows = per_device * shards
  out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(seqs)
  for bins, length in sequence_packing.plan_calls(lengths, row_length, rows):
    packed = sequence_packing.pack_sequences(seqs, length, pad_id, bins=bins, num_rows=rows)
    logp_RxL = np.asarray(token_logprobs_jit(model, packed.ids_RxL, None, temperature=temperature,
                                             segment_ids_BxT=packed.segment_ids_RxL))
    members = [n for bin_ in bins for n in bin_]
    for n in members:
      begin = packed.start_N[n] + len(prompts[n])
      out[n] = logp_RxL[packed.row_N[n], begin:begin + len(responses[n])].astype(np.float32)
    # Every device's rows, padding included.
    step_metrics.count_scoring_call(packed.ids_RxL.size, sum(lengths[n] for n in members))
  return out


def mean_or_nan(values: np.ndarray) -> float:
  """Mean of a row's log-probs; NaN for an empty row (the gate drops it)."""
  return float(np.mean(values)) if len(values) else float("nan")
