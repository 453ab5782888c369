"""Evaluation results: per-benchmark pass@k, the suite average, table, json."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Sequence

import numpy as np

from graft_jax.eval.passk import mean_pass_at_k
from graft_jax.rewards import ScoreStats


@dataclasses.dataclass
class BenchmarkResult:
  """One benchmark: pass@k for each reported k, and what the verifier saw."""

  name: str
  num_problems: int
  samples_per_problem: int
  pass_at: dict[int, float]             # k -> mean unbiased pass@k
  num_correct: dict[str, int]           # problem id -> correct samples
  stats: ScoreStats
  mean_response_tokens: float = 0.0
  truncated_frac: float = 0.0

  @classmethod
  def from_correct(cls, name: str, ids: Sequence[str], correct_PxK: np.ndarray,
                   *, ks: Sequence[int], stats: ScoreStats, **kw
                   ) -> "BenchmarkResult":
    c_P = correct_PxK.sum(axis=1)
    return cls(name=name, num_problems=correct_PxK.shape[0],
               samples_per_problem=correct_PxK.shape[1],
               pass_at={k: mean_pass_at_k(correct_PxK, k) for k in ks},
               num_correct={i: int(c) for i, c in zip(ids, c_P)},
               stats=stats, **kw)

  def as_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["pass_at"] = {str(k): v for k, v in self.pass_at.items()}
    return d


@dataclasses.dataclass
class EvalReport:
  """All benchmarks of a suite; ``average`` is the unweighted mean over
  benchmarks (the paper's "average"), not a mean over all problems."""

  results: list[BenchmarkResult]
  k: int
  ks: tuple[int, ...]
  sampling: object
  template: str

  @property
  def average(self) -> dict[int, float]:
    return {k: float(np.mean([r.pass_at[k] for r in self.results]))
            for k in self.ks}

  def as_dict(self) -> dict:
    return {
        "benchmarks": {r.name: r.as_dict() for r in self.results},
        "average": {str(k): v for k, v in self.average.items()},
        "k": self.k,
        "sampling": dataclasses.asdict(self.sampling),
        "template": self.template,
    }

  def write_json(self, path: str | pathlib.Path) -> None:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(self.as_dict(), indent=2) + "\n")

  def table(self) -> str:
    """A fixed-width table: one row per benchmark, then the average."""
    heads = ["benchmark", "problems"] + [f"pass@{k}" for k in self.ks] + [
        "timeouts", "no_box", "trunc"]
    rows = [[r.name, str(r.num_problems)]
            + [f"{100 * r.pass_at[k]:.2f}" for k in self.ks]
            + [str(r.stats.timeouts), str(r.stats.no_boxed),
               f"{100 * r.truncated_frac:.1f}%"] for r in self.results]
    rows.append(["average", str(sum(r.num_problems for r in self.results))]
                + [f"{100 * self.average[k]:.2f}" for k in self.ks]
                + ["", "", ""])
    widths = [max(len(x) for x in col) for col in zip(heads, *rows)]
    fmt = lambda row: "  ".join(x.ljust(w) if i == 0 else x.rjust(w)
                                for i, (x, w) in enumerate(zip(row, widths))).rstrip()
    rule = "-" * sum(w + 2 for w in widths)
    return "\n".join([fmt(heads), rule] + [fmt(r) for r in rows[:-1]]
                     + [rule, fmt(rows[-1])])
