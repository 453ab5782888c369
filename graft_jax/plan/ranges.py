"""The step and the run's GPU-hours per engine at the ends of the stated inputs'
ranges (`graft_jax.plan.inputs`), and which inputs move them most.

One at a time: each stated input at its low and at its high, the others at their
point, gives its swing, |GPU-hours at one end - at the other| (the step's
seconds beside it). The range's low end sets every input to the end that gave
fewer GPU-hours (fewer step seconds where the hours tie), the high end to the
other: each input moves the plan one way, so these bound every mix of them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from graft_jax.plan import inputs, phases, server_layout

ENGINES = ("JAX static sampler", "JAX slot pool", "vLLM")


@dataclasses.dataclass(frozen=True)
class Swing:
  """One input at its low and at its high: (low, high) of the step and of the run."""
  name: str
  values: tuple[float, float]
  step_s: tuple[float, float]
  gpu_hours: tuple[float, float]

  @property
  def size(self) -> float:
    return abs(self.gpu_hours[1] - self.gpu_hours[0])


@dataclasses.dataclass(frozen=True)
class Range:
  label: str
  point: phases.EnginePlan
  low: phases.EnginePlan
  high: phases.EnginePlan
  swings: tuple[Swing, ...]  # largest first

  def most(self, top: int = 3) -> list[Swing]:
    """The ``top`` inputs that move the plan, largest swing first."""
    return [s for s in self.swings if s.size or s.step_s[0] != s.step_s[1]][:top]


def engine_range(label: str, plan_fn: Callable, rates, a, table=inputs.INPUTS) -> Range:
  """``plan_fn(rates, a) -> EnginePlan`` at the point, one stated input at a time at
  each end, and every input at its faster and at its slower end."""
  point, swings, fast, slow = plan_fn(rates, a), [], {}, {}
  for i in table:
    if i.measured:
      continue
    lo, hi = (plan_fn(*inputs.with_values(rates, a, {i.name: v})) for v in (i.low, i.high))
    swings.append(Swing(i.name, (i.low, i.high), (lo.step_seconds, hi.step_seconds),
                        (lo.gpu_hours(), hi.gpu_hours())))
    low_first = (lo.gpu_hours(), lo.step_seconds) <= (hi.gpu_hours(), hi.step_seconds)
    fast[i.name], slow[i.name] = (i.low, i.high) if low_first else (i.high, i.low)
  low, high = (plan_fn(*inputs.with_values(rates, a, v)) for v in (fast, slow))
  ranked = sorted(swings, key=lambda s: (s.size, abs(s.step_s[1] - s.step_s[0])), reverse=True)
  return Range(label, point, low, high, tuple(ranked))


def engine_ranges(cfg, models: dict, devices: int, rates, a, steps: int, *, sync: str,
                  layout: server_layout.ServerLayout) -> list[Range]:
  """`ENGINES`' ranges for ``cfg``: the JAX engine as each sampler, vLLM as ``layout``."""
  as_sampler = lambda s: dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout,
                                                                              sampler=s))
  runs = (lambda r, x: phases.plan_engine(as_sampler("static"), models, "jax", devices, r, x,
                                          steps),
          lambda r, x: phases.plan_engine(as_sampler("pool"), models, "jax", devices, r, x,
                                          steps),
          lambda r, x: phases.plan_engine(cfg, models, "vllm", devices, r, x, steps, sync=sync,
                                          layout=layout))
  return [engine_range(label, run, rates, a) for label, run in zip(ENGINES, runs)]


def format_range(r: Range, top: int = 3) -> str:
  """Two lines: the step and GPU-hours (with validation) at the point, low and high end;
  the ``top`` inputs by swing."""
  moved = r.most(top)
  g = lambda v: f"{v:.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")
  most = "; ".join(f"{s.name} {g(s.values[0])}..{g(s.values[1])}: {s.step_s[0]:.0f}.."
                   f"{s.step_s[1]:.0f} s, {s.gpu_hours[0]:.0f}..{s.gpu_hours[1]:.0f} GPU-hours"
                   for s in moved)
  return (f"range {r.label}: step {r.point.step_seconds:.0f} s (low {r.low.step_seconds:.0f}, "
          f"high {r.high.step_seconds:.0f}), {r.point.gpu_hours():.0f} GPU-hours with validation "
          f"(low {r.low.gpu_hours():.0f}, high {r.high.gpu_hours():.0f})\n"
          f"  moved most by: {most or 'nothing stated'}")
