"""Validation during training: held-out pass@1 of every policy every ``eval.every_steps`` steps.

The paper validates every 5 steps (T=0.6, top-p 0.95, 8 samples per problem,
pass@1 averaged over its benchmarks) and reports the best checkpoint of that
sweep, with the same rule for every method. A ``Validator`` samples through
each policy's own rollout engine (the JAX sampler or its vLLM sidecar, which
serve the current weights) with the run's reward, and keeps the history so a
run can name its best step.

Sampling seeds are fixed per evaluation and never touch the training keys, so
a run with validation trains exactly as the same run without it.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

from graft_jax import data
from graft_jax import eval as eval_lib
from graft_jax.config.checks import benchmark_file
from graft_jax.rollout import SamplingParams
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train.policy import PoolSettings


SYNTHETIC = "synthetic"
SYNTHETIC_DEFAULT_SIZE = 64  # per family when eval.max_examples is 0
_EVAL_SEED_OFFSET = 10_000  # added to the run's seeds for held-out problems and eval sampling


def eval_suite(cfg, train_problems=()) -> dict[str, list]:
  """The problems ``cfg.eval`` names, benchmark by benchmark.

  ``synthetic`` is one benchmark per family of ``cfg.data.synthetic``, disjoint
  from ``train_problems``: ``synthetic/<family>``. Any other name is a
  MATH-format file in ``eval.data_dir``. ``eval.max_examples`` caps each
  benchmark (0: all; 64 per synthetic family).
  """
  e = cfg.eval
  limit = e.max_examples or None
  order, synthetic, files = [], {}, {}
  for name in e.suite:
    if name == SYNTHETIC:
      s = cfg.data.synthetic
      seen = {p.problem for p in train_problems}
      for family in s.families:
        key = f"{SYNTHETIC}/{family}"
        synthetic[key] = data.make_synthetic(
            family, limit or SYNTHETIC_DEFAULT_SIZE, seed=s.seed + _EVAL_SEED_OFFSET,
            difficulty=s.difficulty, exclude=seen)
        order.append(key)
      continue
    if not e.data_dir:
      raise FileNotFoundError(
          f"eval.suite names the file benchmark {name!r} but eval.data_dir is not set; "
          f"set eval.data_dir, or eval.every_steps=0 to train without validation")
    files[name] = benchmark_file(e.data_dir, name)
    order.append(name)
  # The benchmarks' shared loader: every file checked first, counts logged, empty refused.
  loaded = data.load_suite(files, limit=limit)[0] if files else {}
  both = {**synthetic, **loaded}
  return {name: both[name] for name in order}


@dataclasses.dataclass
class Validator:
  """Evaluates policies on a fixed suite; ``history[name]`` is ``[(step, average pass@1)]``.

  Args:
    suite: benchmark name -> problems (see ``eval_suite``).
    every_steps: validate after each step ``s`` with ``(s + 1) % every_steps == 0``,
      and after the last step.
    k, temperature, top_p, seed: the eval sampling (``cfg.eval``, ``cfg.seed``).
    max_new_tokens: the run's response budget.
    prompt_suffix: the training prompt's suffix, so validation prompts are the
      training ones (problem + suffix, no special tokens).
    score_fn: ``(texts, golds) -> (rewards, stats)``, the run's reward.
    batch_size: problems per engine call; 0: the whole suite in one call per model
      (the slot pool, ``rollout.sampler='pool'``, keeps its slots busy across it).
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
               score_fn=score_fn, batch_size=0 if pool else 64)

  def due(self, step: int, total: int) -> bool:
    """Whether to validate after (0-based) ``step`` of a ``total``-step run."""
    return (step + 1) % self.every_steps == 0 or step + 1 == total

  def run(self, policies: dict, step: int) -> dict:
    """``{name: {benchmark: pass@1, ..., "average": ...}}`` for the current weights."""
    template = data.PromptTemplate("{problem}" + self.prompt_suffix)
    sampling = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                              top_p=self.top_p, seed=self.seed + _EVAL_SEED_OFFSET)
    out = {}
    for name, policy in policies.items():
      t0 = time.perf_counter()
      report = eval_lib.evaluate(policy.engine, policy.tokenizer, self.suite, k=self.k,
                                 sampling=sampling, template=template,
                                 batch_size=self.batch_size, ks=(1,), score_fn=self.score_fn,
                                 log_each=False)
      metrics = {r.name: r.pass_at[1] for r in report.results}
      metrics["average"] = report.average[1]
      metrics["seconds"] = time.perf_counter() - t0
      self.history.setdefault(name, []).append((step, metrics["average"]))
      out[name] = metrics
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
