"""Rebuild a shipped toy pair from its recipe and compare it with the files in the repo.

On a machine like the one that built it (same processor kind, jaxlib and
XLA_FLAGS: `host_fingerprint.fingerprint`), the rebuild must match every file bit
for bit. Elsewhere the tokenizers and configs must still match bit for bit (no
floating point goes into them), and the weights, which XLA computes with the
host's vector width and cache blocking, must give a pair of the same competence
as the recipe defines it (`spec.ToyModelSpec.competence`): for each model and
family, the share of held-out samples that choose the correct procedure must
agree with the shipped pair's within

    |p_rebuilt - p_shipped| <= Z * sqrt(2 * p_bar * (1 - p_bar) / n),   p_bar = max(mean, 1/n),

n = eval_per_family * eval_samples (two independent binomial estimates; the
floor keeps a near-zero share from demanding exact equality). Pass rates are
printed beside it but not bounded: they also depend on how well each build
learned its single-digit facts, which varies between builds by more than
sampling noise while the correct-procedure shares agree (RESULTS.md has two
rebuilds on another processor).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path

from graft_jax import host_fingerprint
from graft_jax.toy import pair as pair_lib
from graft_jax.toy import spec as spec_lib

Z = 4.0
WEIGHTS = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class Comparison:
  """One model, family and measure: the shipped and rebuilt rates and the bound."""
  model: str
  family: str
  measure: str  # "correct procedure" (bounded) or "pass rate" (shown only)
  shipped: float
  rebuilt: float
  bound: float

  @property
  def bounded(self) -> bool:
    return self.measure == "correct procedure"

  @property
  def ok(self) -> bool:
    return not self.bounded or abs(self.rebuilt - self.shipped) <= self.bound


@dataclasses.dataclass(frozen=True)
class RebuildCheck:
  """What `check()` found; `ok` says whether the rebuild reproduces the shipped pair."""
  key: str
  shipped_key: str | None
  differ: tuple[str, ...]
  shipped_machine: dict | None
  machine: dict
  comparisons: tuple[Comparison, ...] = ()

  @property
  def same_machine(self) -> bool:
    return self.shipped_machine == self.machine

  @property
  def weights_only(self) -> bool:
    """Some files differ, and all of them are weights."""
    return bool(self.differ) and all(f.endswith(WEIGHTS) for f in self.differ)

  @property
  def ok(self) -> bool:
    if self.key != self.shipped_key:
      return False
    if not self.differ:
      return True
    return (self.weights_only and not self.same_machine
            and any(c.bounded for c in self.comparisons) and all(c.ok for c in self.comparisons))

  def lines(self) -> list[str]:
    out = [f"key {self.key} (shipped {self.shipped_key}); "
           f"files that differ: {list(self.differ) or 'none'}"]
    if self.weights_only:
      out.append(f"shipped pair built on: {self.shipped_machine or 'not recorded'}")
      out.append(f"this machine:          {self.machine}")
      if self.same_machine:
        out.append("the same kind of machine must rebuild the weights bit for bit")
    for c in self.comparisons:
      limit = f" {'<=' if c.ok else '>'} {c.bound:.4f}" if c.bounded else " (not bounded)"
      out.append(f"  {c.model} {c.family} {c.measure}: shipped {c.shipped:.4f}, rebuilt "
                 f"{c.rebuilt:.4f}, |diff| {abs(c.rebuilt - c.shipped):.4f}{limit}")
    out.append("reproduced bit for bit" if self.ok and not self.differ else
               "reproduced: weights differ with the processor, competence matches" if self.ok
               else "NOT reproduced")
    return out


def bound(shipped: float, rebuilt: float, n: int, z: float = Z) -> float:
  """The largest difference two binomial estimates of one rate over n draws may show."""
  p_bar = max((shipped + rebuilt) / 2, 1.0 / n)
  return z * math.sqrt(2 * p_bar * (1 - p_bar) / n)


def compare_tables(shipped: dict, rebuilt: dict, n: int) -> tuple[Comparison, ...]:
  """Every (model, family) correct-procedure share and pass rate of two pass-rate tables."""
  out = []
  for name, row in shipped.items():
    for measure, key in (("correct procedure", "strategy"), ("pass rate", "families")):
      for family, value in row[key].items():
        got = rebuilt[name][key][family]
        out.append(Comparison(name, family, measure, value, got, bound(value, got, n)))
  return tuple(out)


def check(cfg: spec_lib.ToyPairConfig | None = None) -> RebuildCheck:
  """Rebuild a regime's pair (the default's unless `cfg` says) in a temporary folder and
  compare it with the one shipped (`pair.shipped_dir`)."""
  from graft_jax.toy.skill_table import pass_rate_table  # pylint: disable=import-outside-toplevel

  cfg = cfg or spec_lib.default_config()
  shipped = pair_lib.read_record(pair_lib.shipped_dir(cfg)) or {}
  shipped_files = shipped.get("files", {})
  with tempfile.TemporaryDirectory() as tmp:
    built = pair_lib.ensure_toy_pair(Path(tmp) / "pair", cfg, force=True, evaluate=False)
    files = built.record["files"]
    differ = tuple(sorted(f for f in {**shipped_files, **files}
                          if shipped_files.get(f) != files.get(f)))
    result = RebuildCheck(built.key, shipped.get("key"), differ, shipped.get("build_machine"),
                          built.record["build_machine"])
    if result.weights_only and not result.same_machine and "pass_rates" in shipped:
      table = pass_rate_table(built.model_dirs, cfg)
      n = cfg.eval_per_family * cfg.eval_samples
      result = dataclasses.replace(result,
                                   comparisons=compare_tables(shipped["pass_rates"], table, n))
  return result
