"""pass@1 / pass@k of one policy on a benchmark suite.

The engine is anything with the `graft_jax.rollout.types.RolloutEngine`
``generate`` protocol (token ids in, `RolloutBatch` out); the tokenizer turns
templated problem text into prompt ids and response ids back into text, which
`graft_jax.rewards.score` checks against the gold answers.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Mapping, Sequence

import numpy as np

from graft_jax import rewards
from graft_jax.data.problem import Problem
from graft_jax.data.prompts import PromptTemplate
from graft_jax.eval.report import BenchmarkResult, EvalReport
from graft_jax.rollout.types import RolloutBatch, SamplingParams

# The paper's evaluation sampling: T=0.6, top-p 0.95, 4096 new tokens.
EVAL_SAMPLING = SamplingParams(max_new_tokens=4096, temperature=0.6, top_p=0.95)


def _check_batch(batch: RolloutBatch, num_prompts: int, k: int) -> None:
  # A protocol violation would silently mis-assign samples to problems.
  b = num_prompts * k
  if batch.n != k or batch.tokens_BxL.shape[0] != b:
    raise ValueError(f"engine returned {batch.tokens_BxL.shape[0]} rows with "
                     f"n={batch.n}; expected {b} rows with n={k}")
  counts = np.bincount(batch.prompt_index_B, minlength=num_prompts)
  if counts.shape[0] != num_prompts or not np.all(counts == k):
    raise ValueError(f"engine prompt_index_B does not hold each of the "
                     f"{num_prompts} prompts exactly {k} times")


def _encode(name: str, problems: Sequence[Problem], tokenizer, template: PromptTemplate,
            add_special_tokens: bool) -> list[list[int]]:
  prompts = []
  for p in problems:
    ids = list(tokenizer.encode(template.render(p), add_special_tokens=add_special_tokens))
    if not ids:
      raise ValueError(f"{name}: problem {p.id} encodes to an empty prompt")
    prompts.append(ids)
  return prompts


class _Tally:
  """One benchmark's scores, filled from the engine calls that sampled its problems."""

  def __init__(self, num_problems: int, k: int):
    self.correct_PxK = np.zeros((num_problems, k), bool)
    self.filled_P = np.zeros(num_problems, np.int64)
    self.stats = rewards.ScoreStats()
    self.tokens, self.truncated = 0, 0

  def add(self, problems: Sequence[Problem], first: int, batch: RolloutBatch, rows, *,
          pool, timeout_s: float, tokenizer, score_fn):
    """Scores ``batch``'s ``rows``, whose ``prompt_index_B - first`` index ``problems``."""
    texts = [tokenizer.decode(batch.response_ids(b), skip_special_tokens=True) for b in rows]
    index = [int(batch.prompt_index_B[b]) - first for b in rows]
    golds = [problems[i].answer for i in index]
    if score_fn is None:
      rewards_B, s = rewards.score(texts, golds, timeout_s=timeout_s, pool=pool)
    else:
      rewards_B, s = score_fn(texts, golds)
    if s is not None:
      self.stats += s
    for reward, i in zip(rewards_B, index):
      self.correct_PxK[i, self.filled_P[i]] = reward > 0
      self.filled_P[i] += 1
    self.tokens += int(batch.lengths_B[rows].sum())
    self.truncated += int(np.sum(batch.truncated_B[rows]))

  def result(self, name: str, problems: Sequence[Problem], ks) -> BenchmarkResult:
    n_samples = self.correct_PxK.size
    return BenchmarkResult.from_correct(
        name, [p.id for p in problems], self.correct_PxK, ks=ks, stats=self.stats,
        mean_response_tokens=self.tokens / n_samples, truncated_frac=self.truncated / n_samples)


def _run_benchmark(name: str, problems: Sequence[Problem], engine, tokenizer,
                   *, k: int, sampling: SamplingParams, template: PromptTemplate,
                   batch_size: int, ks: Sequence[int], pool, timeout_s: float,
                   add_special_tokens: bool, score_fn=None) -> BenchmarkResult:
  tally = _Tally(len(problems), k)
  for call, start in enumerate(range(0, len(problems), batch_size)):
    chunk = problems[start:start + batch_size]
    prompts = _encode(name, chunk, tokenizer, template, add_special_tokens)
    # A different seed per call: batches must not share one random stream.
    params = dataclasses.replace(sampling, seed=sampling.seed + call)
    batch = engine.generate(prompts, k, params)
    _check_batch(batch, len(chunk), k)
    tally.add(problems, -start, batch, np.arange(len(chunk) * k), pool=pool, timeout_s=timeout_s,
              tokenizer=tokenizer, score_fn=score_fn)
  return tally.result(name, problems, ks)


def _run_suite(suite: Mapping[str, Sequence[Problem]], engine, tokenizer, *, k: int,
               sampling: SamplingParams, template: PromptTemplate, ks: Sequence[int], pool,
               timeout_s: float, add_special_tokens: bool, score_fn=None) -> list[BenchmarkResult]:
  """Every benchmark's problems in one engine call: a slot-pool engine keeps its
  slots busy over the whole suite instead of waiting on each call's longest sample."""
  prompts, firsts = [], {}
  for name, problems in suite.items():
    firsts[name] = len(prompts)
    prompts += _encode(name, problems, tokenizer, template, add_special_tokens)
  batch = engine.generate(prompts, k, sampling)
  _check_batch(batch, len(prompts), k)
  results = []
  for name, problems in suite.items():
    first = firsts[name]
    rows = np.flatnonzero((batch.prompt_index_B >= first)
                          & (batch.prompt_index_B < first + len(problems)))
    tally = _Tally(len(problems), k)
    tally.add(problems, first, batch, rows, pool=pool, timeout_s=timeout_s, tokenizer=tokenizer,
              score_fn=score_fn)
    results.append(tally.result(name, problems, ks))
  return results


def evaluate(engine, tokenizer, suite: Mapping[str, Sequence[Problem]], *,
             k: int = 8, sampling: SamplingParams = EVAL_SAMPLING,
             template: PromptTemplate = PromptTemplate(), batch_size: int = 64,
             ks: Sequence[int] | None = None,
             pool: rewards.VerifierPool | None = None,
             timeout_s: float = rewards.DEFAULT_TIMEOUT_S,
             add_special_tokens: bool = False, score_fn=None,
             log_each: bool = True) -> EvalReport:
  """Samples ``k`` responses per problem and reports pass@1 and pass@k.

  Args:
    engine: has ``generate(prompts, n, params) -> RolloutBatch``.
    tokenizer: has ``encode(text, add_special_tokens=...)`` and
      ``decode(ids, skip_special_tokens=True)``, like a transformers tokenizer.
    suite: benchmark name -> problems (see `graft_jax.data.load_suite`).
    k: samples per problem (the paper: 8).
    sampling: temperature / top-p / length / seed; ``seed + i`` is used for
      the i-th engine call of each benchmark.
    template: turns a problem into prompt text (default: the paper's).
    batch_size: problems per engine call; 0: the whole suite in one call (one
      sampling seed, ``sampling.seed``).
    ks: the k's of pass@k to report; default (1, k).
    pool: verifier pool; default `graft_jax.rewards.default_pool()`.
    timeout_s: per-answer verification budget (a timeout scores 0).
    add_special_tokens: passed to ``tokenizer.encode`` (e.g. to add BOS).
    score_fn: ``(texts, golds) -> (rewards, stats or None)`` in place of
      math-verify (a training run validates with its own reward); ``pool``
      and ``timeout_s`` are then unused.
    log_each: log a line per benchmark as it finishes (a training run's
      validation shows its result in the progress bar instead).

  Returns:
    An `EvalReport`; ``report.table()`` prints, ``report.write_json(path)``.
  """
  ks = tuple(sorted(set(ks or (1, k))))
  if k < 1 or batch_size < 0 or not all(1 <= x <= k for x in ks):
    raise ValueError(f"evaluate: need k >= 1, batch_size >= 0 and every pass@k "
                     f"k in [1, {k}]; got k={k}, batch_size={batch_size}, ks={ks}")
  for name, problems in suite.items():
    if not problems:
      raise ValueError(f"evaluate: benchmark {name} has no problems")
  if batch_size == 0:
    start = time.perf_counter()
    results = _run_suite(suite, engine, tokenizer, k=k, sampling=sampling, template=template,
                         ks=ks, pool=pool, timeout_s=timeout_s,
                         add_special_tokens=add_special_tokens, score_fn=score_fn)
    if log_each:
      for result in results:
        logging.info("%s: pass@1 %.4f over %d problems (suite in one call, %.1f s)",
                     result.name, result.pass_at[1], result.num_problems,
                     time.perf_counter() - start)
    return EvalReport(results=results, k=k, ks=ks, sampling=sampling,
                      template=template.template)
  results = []
  for name, problems in suite.items():
    start = time.perf_counter()
    result = _run_benchmark(
        name, list(problems), engine, tokenizer, k=k, sampling=sampling,
        template=template, batch_size=batch_size, ks=ks, pool=pool,
        timeout_s=timeout_s, add_special_tokens=add_special_tokens, score_fn=score_fn)
    if log_each:
      logging.info("%s: pass@1 %.4f over %d problems (%.1f s)", name,
                   result.pass_at[1], result.num_problems,
                   time.perf_counter() - start)
    results.append(result)
  return EvalReport(results=results, k=k, ks=ks, sampling=sampling,
                    template=template.template)
