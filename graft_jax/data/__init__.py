"""Problems: MATH-format loaders, benchmark suites, synthetic tasks, prompts."""

from graft_jax.data.loaders import LoadStats
from graft_jax.data.loaders import load_problems
from graft_jax.data.loaders import write_jsonl
from graft_jax.data.problem import Problem
from graft_jax.data.problem import stable_id
from graft_jax.data.prompts import PAPER_TEMPLATE
from graft_jax.data.prompts import PromptTemplate
from graft_jax.data.rows import DataError
from graft_jax.data.suites import PAPER_BENCHMARKS
from graft_jax.data.suites import check_suite_files
from graft_jax.data.suites import load_suite
from graft_jax.data.suites import ordered
from graft_jax.data.synthetic import FAMILY_NAMES
from graft_jax.data.synthetic import SKILL_GROUPS
from graft_jax.data.synthetic import make_synthetic
from graft_jax.data.synthetic import make_train_eval
from graft_jax.data.synthetic import split_problems

__all__ = [
    "DataError", "FAMILY_NAMES", "LoadStats", "PAPER_BENCHMARKS",
    "PAPER_TEMPLATE", "Problem", "PromptTemplate", "SKILL_GROUPS",
    "check_suite_files", "load_problems", "load_suite", "make_synthetic",
    "make_train_eval", "ordered", "split_problems", "stable_id", "write_jsonl",
]
