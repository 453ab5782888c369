"""The step seconds and GPU-hours README.md, docs/clusters.md and docs/plan.md quote per
engine are what `launch/plan.py` prints: its phase plans, run here in-process at its
default assumptions (4 x H200, MATH train's 7,500 prompts), rounded as the docs round."""

import dataclasses
import pathlib
import re

import pytest

from graft_jax.config import run_config as config_lib
from graft_jax.config.checks import policy_configs
from graft_jax.plan import phases, ranges, run, server_layout, step_time
from graft_jax.plan.lengths import ResponseLengths

ROOT = pathlib.Path(__file__).resolve().parents[2]
MATH_TRAIN = 7500
PAIRS = {"SmolLM3-3B / Qwen3-1.7B": "pair_smollm3_qwen3",
         "SmolLM3-3B / OctoThinker-3B": "pair_smollm3_octothinker",
         "Qwen3-1.7B / OctoThinker-3B": "pair_qwen3_octothinker"}
REPLICAS = dataclasses.replace(server_layout.REPLICAS_4, replicas=4)


def _plan(pair: str, engine: str, *, sampler: str = "pool", layout=None, mean: float = 1200,
          shape: float = 2.0, **eval_fields) -> phases.EnginePlan:
  cd = config_lib.load_config(f"configs/{pair}.py")
  with cd.unlocked():
    cd.eval.update(eval_fields)
    cd.rollout.sampler = sampler
  cfg = config_lib.from_config_dict(cd)
  models = {m.name: run.model_config(m) for m in policy_configs(cfg)}
  a = phases.Assumptions(lengths=ResponseLengths(cfg.max_response_len, mean, shape))
  return phases.plan_engine(cfg, models, engine, 4, step_time.MEASURED_H200, a,
                            step_time.run_steps(cfg, MATH_TRAIN), layout=layout or REPLICAS)


def _printed(plan) -> str:
  """'step s, hours without / with', as the docs' tables give them."""
  return f"{plan.step_seconds:.0f} s, {plan.gpu_hours(False):.0f} / {plan.gpu_hours(True):.0f}"


def _rows(path: str, first_cell: str) -> list[list[str]]:
  """The cells of each table row of ``path`` whose first cell starts with ``first_cell``."""
  rows = []
  for line in (ROOT / path).read_text().splitlines():
    cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
    if line.startswith("|") and cells[0].startswith(first_cell):
      rows.append(cells)
  return rows


@pytest.mark.parametrize("label", PAIRS)
def test_readme_pair_table(label):
  (cells,) = _rows("README.md", label)
  pool, vllm = _plan(PAIRS[label], "jax"), _plan(PAIRS[label], "vllm")
  assert cells[4] == _printed(pool), label
  assert cells[5] == _printed(vllm), label


def test_clusters_placement_table():
  dedicated = _plan("pair_smollm3_qwen3", "vllm", layout=server_layout.DEDICATED)
  replicas = _plan("pair_smollm3_qwen3", "vllm")
  (one,) = _rows("docs/clusters.md", "one server per model")
  (four,) = _rows("docs/clusters.md", "four servers per model")
  ratio = replicas.phase_seconds("sampling") / dedicated.phase_seconds("sampling")
  assert one[1:] == [f"{dedicated.phase_seconds('sampling'):.0f} s",
                     f"{dedicated.step_seconds:.0f} s", f"{dedicated.gpu_hours():.0f} GPU-hours"]
  assert four[1:] == [f"{replicas.phase_seconds('sampling'):.0f} s ({ratio:.2f}x)",
                      f"{replicas.step_seconds:.0f} s", f"{replicas.gpu_hours():.0f} GPU-hours"]


def test_plan_md_response_length_table():
  """docs/plan.md's lengths table: the static sampler and vLLM's two placements, the
  paper's validation (every 5 steps at k=8)."""
  rows = _rows("docs/plan.md", "")
  table = [r for r in rows if re.fullmatch(r"[\d,]+, \d", r[0])]
  assert len(table) == 5
  for cells in table:
    mean, shape = (float(x.replace(",", "")) for x in cells[0].split(", "))
    plans = [_plan("pair_smollm3_qwen3", engine, sampler="static", layout=layout, mean=mean,
                   shape=shape, every_steps=5, k=8)
             for engine, layout in (("jax", None), ("vllm", None),
                                    ("vllm", server_layout.DEDICATED))]
    assert cells[2:] == [_printed(p) for p in plans], cells[0]


def test_plan_md_ranges_table():
  """docs/plan.md's ranges of pair 1, as `launch/plan.py` prints them (`ranges`)."""
  cfg = config_lib.from_config_dict(config_lib.load_config("configs/pair_smollm3_qwen3.py"))
  models = {m.name: run.model_config(m) for m in policy_configs(cfg)}
  a = phases.Assumptions(lengths=ResponseLengths(cfg.max_response_len, 1200, 2.0))
  got = ranges.engine_ranges(cfg, models, 4, step_time.MEASURED_H200, a,
                             step_time.run_steps(cfg, MATH_TRAIN), sync="nccl", layout=REPLICAS)
  for r in got:
    (cells,) = _rows("docs/plan.md", r.label if r.label != "vLLM" else "vLLM, 4 servers")
    assert cells[1] == (f"{r.point.step_seconds:.0f} s ({r.low.step_seconds:.0f} - "
                        f"{r.high.step_seconds:.0f})"), r.label
    assert cells[2] == (f"{r.point.gpu_hours():.0f} ({r.low.gpu_hours():.0f} - "
                        f"{r.high.gpu_hours():.0f})"), r.label
    assert cells[3] == ", ".join(f"`{s.name}`" for s in r.most(3)), r.label
