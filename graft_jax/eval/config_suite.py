"""The held-out suite a run config names (``cfg.eval``), benchmark by benchmark: what
`graft_jax.train.validation.Validator` validates every policy on during training."""

from __future__ import annotations

from graft_jax import data
from graft_jax.config.checks import benchmark_file

SYNTHETIC = "synthetic"
SYNTHETIC_DEFAULT_SIZE = 64  # per family when eval.max_examples is 0
EVAL_SEED_OFFSET = 10_000  # added to the run's seeds for held-out problems and eval sampling


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
            family, limit or SYNTHETIC_DEFAULT_SIZE, seed=s.seed + EVAL_SEED_OFFSET,
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
