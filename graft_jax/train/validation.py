"""Validation during training: held-out pass@1 of every policy every ``eval.every_steps`` steps.

The paper validates every 5 steps (T=0.6, top-p 0.95, 8 samples per problem,
pass@1 averaged over its benchmarks) and reports the best checkpoint of that
sweep, with the same rule for every method. A ``Validator`` samples through
each policy's own rollout engine (the JAX sampler or its vLLM sidecar, which
serve the current weights) with the run's reward, and keeps the history so a
run can name its best step.

Sampling seeds are fixed per evaluation and never touch the training keys, so
a run with validation trains exactly as the same run without it. The models
validate side by side where they sample so (`collect.samples_concurrently`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import threading
import time

from graft_jax import data
from graft_jax import eval as eval_lib
from graft_jax.eval.config_suite import EVAL_SEED_OFFSET, eval_suite
from graft_jax.rollout import SamplingParams
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train.collect import each_model, samples_concurrently
from graft_jax.train.policy import PoolSettings


@dataclasses.dataclass
class Validator:
  """Evaluates policies on a fixed suite; ``history[name]`` is ``[(step, average pass@1)]``.

  Args:
    suite: benchmark name -> problems (`graft_jax.eval.config_suite.eval_suite`).
    every_steps: validate after each step ``s`` with ``(s + 1) % every_steps == 0``,
      and after the last step.
    k, temperature, top_p, seed: the eval sampling (``cfg.eval``, ``cfg.seed``).
    max_new_tokens: the run's response budget.
    prompt_suffix: the training prompt's suffix, so validation prompts are the
      training ones (problem + suffix, no special tokens).
    score_fn: ``(texts, golds) -> (rewards, stats)``, the run's reward.
    batch_size: problems per engine call; 0: the whole suite in one call per model
      (the slot pool, ``rollout.sampler='pool'``, keeps its slots busy across it).
    concurrent: ``rollout.concurrent``, whether the models validate side by side.
  """

  suite: dict
  every_steps: int
  k: int
  temperature: float
  top_p: float
  seed: int
  max_new_tokens: int
  prompt_suffix: str
  score_fn: object
  batch_size: int = 64
  concurrent: str = "off"
  history: dict = dataclasses.field(default_factory=dict)

  @classmethod
  def from_config(cls, cfg, score_fn, train_problems=()) -> "Validator | None":
    """None when ``eval.every_steps`` is 0."""
    if not cfg.eval.every_steps:
      return None
    e = cfg.eval
    pool = PoolSettings.from_config(cfg) is not None
    return cls(eval_suite(cfg, train_problems), every_steps=e.every_steps, k=e.k,
               temperature=e.temperature, top_p=e.top_p, seed=cfg.seed,
               max_new_tokens=cfg.max_response_len, prompt_suffix=cfg.data.prompt_suffix,
               score_fn=score_fn, batch_size=0 if pool else 64,
               concurrent=cfg.rollout.concurrent)

  def due(self, step: int, total: int) -> bool:
    """Whether to validate after (0-based) ``step`` of a ``total``-step run."""
    return (step + 1) % self.every_steps == 0 or step + 1 == total

  def run(self, policies: dict, step: int) -> dict:
    """``{name: {benchmark: pass@1, ..., "average", "seconds", "start_s", "end_s"}}`` for the
    current weights (start and end in seconds since this call began)."""
    template = data.PromptTemplate("{problem}" + self.prompt_suffix)
    sampling = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                              top_p=self.top_p, seed=self.seed + EVAL_SEED_OFFSET)
    turn, origin = threading.Lock(), time.perf_counter()

    def score(texts, golds):  # one model at a time: the run's reward need not be thread-safe
      with turn:
        return self.score_fn(texts, golds)

    def validate(name):
      t0 = time.perf_counter()
      report = eval_lib.evaluate(policies[name].engine, policies[name].tokenizer, self.suite,
                                 k=self.k, sampling=sampling, template=template,
                                 batch_size=self.batch_size, ks=(1,), log_each=False,
                                 score_fn=score if self.score_fn else None)  # None: math-verify
      t1 = time.perf_counter()
      return {**{r.name: r.pass_at[1] for r in report.results}, "average": report.average[1],
              "seconds": t1 - t0, "start_s": t0 - origin, "end_s": t1 - origin}

    out = dict(each_model(list(policies), validate,
                          samples_concurrently(policies, self.concurrent)))
    for name, metrics in out.items():
      self.history.setdefault(name, []).append((step, metrics["average"]))
    return out

  def resume(self, metrics_path: pathlib.Path, names, *, before_step: int) -> None:
    """Rebuilds ``history`` from a resumed run's metrics.jsonl (its steps before ``before_step``)."""
    self.history = {name: [] for name in names}
    if before_step == 0 or not pathlib.Path(metrics_path).exists():
      return
    for record in read_jsonl(metrics_path):
      for name in names:
        value = record.get(f"{name}/eval/average")
        if record["step"] < before_step and value is not None:
          self.history[name].append((record["step"], value))

  def best(self) -> dict:
    """``{name: (step, average pass@1)}`` of the best validation so far (earliest on ties)."""
    return {name: max(h, key=lambda x: (x[1], -x[0])) for name, h in self.history.items() if h}
