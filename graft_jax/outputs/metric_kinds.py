"""How a metric of the update combines over micro-batches, updates and a step: declared
where the metric is made (a loss returns `Metric`s), never read from its name.

A loss returns ``{name: Metric(value, reducer)}``; the update adds micro-batches and
`graft_jax.outputs.step_metrics` combines a step's updates by each metric's reducer.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

# Already divided by the whole minibatch's counts (a loss term, a count per update):
# micro-batches add up; a step logs the mean over all its updates.
MEAN = "minibatch_mean"
# A total (tokens run, rows left out, a gap's sum): added over micro-batches and
# updates; a step logs the sum.
SUM = "sum"
# A sum or count a step pools another metric from (clipped tokens over tokens):
# added over micro-batches and updates, not logged itself.
POOLED = "pooled"
# A fraction over a micro-batch's loss units: weighted by the micro-batch's share of
# them; a step logs the mean over the updates that ran a row.
FRACTION = "fraction"
# A maximum over micro-batches, updates and a step (of the updates that ran a row).
MAX = "max"
REDUCERS = (MEAN, SUM, POOLED, FRACTION, MAX)


@flax.struct.dataclass
class Metric:
  """A metric's value and its reducer (static: one of `REDUCERS`)."""

  value: jax.Array
  reducer: str = flax.struct.field(pytree_node=False, default=FRACTION)

  def __float__(self) -> float:
    return float(self.value)


def metrics(reducer: str, **values) -> dict:
  """``values`` as `Metric`s reduced by ``reducer``."""
  if reducer not in REDUCERS:
    raise ValueError(f"reducer must be one of {', '.join(REDUCERS)}, got {reducer!r}")
  return {k: Metric(v, reducer) for k, v in values.items()}


def add_micro_batch(total: Metric, metric: Metric, share) -> Metric:
  """``total`` with one micro-batch's ``metric`` in (``share``: its share of loss units)."""
  if metric.reducer == MAX:
    return metric.replace(value=jnp.maximum(total.value, metric.value))
  scale = share if metric.reducer == FRACTION else 1.0
  return metric.replace(value=total.value + metric.value * scale)
