"""Evaluation: sample k answers per benchmark problem, report pass@1 / pass@k."""

from graft_jax.eval.suite_eval import EVAL_SAMPLING
from graft_jax.eval.suite_eval import evaluate
from graft_jax.eval.passk import mean_pass_at_k
from graft_jax.eval.passk import pass_at_k
from graft_jax.eval.report import BenchmarkResult
from graft_jax.eval.report import EvalReport

__all__ = ["EVAL_SAMPLING", "BenchmarkResult", "EvalReport", "evaluate",
           "mean_pass_at_k", "pass_at_k"]
