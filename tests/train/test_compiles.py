"""No XLA compilation after the first step of a 20-step run whose prompt and response lengths vary.

Counts every backend compilation (the sampler, the scorer, the update, and
any eager op on a new shape) with a `jax.monitoring` listener: a count, not
a timing. The rows stay within the run's length budget (max_prompt_len +
max_response_len); longer ones take a further bucket (`bucket_length`).
"""

import collections

import jax
import numpy as np
import pytest
from jax import monitoring

from configs import toy
from graft_jax.config import run_config as config_lib
from graft_jax.train.policy import make_policy
from graft_jax.train.step import train_step
from tests.train import tiny_pair

pytestmark = pytest.mark.slow  # two 20-step runs; most of it is the first step's compiles
STEPS = 20
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def problems(num, seed=0):
  """"Say c." with 0 to 3 filler sentences: prompts of varying length."""
  rng = np.random.default_rng(seed)
  return [tiny_pair.Problem(f"say-{i}", f"Say {p.answer}." + " Now." * int(rng.integers(0, 4)),
                            p.answer) for i, p in enumerate(tiny_pair.problems(num, seed))]


def run(method, num_minibatches, names, steps=STEPS, micro_batch_tokens=None):
  cd = toy.get_config(method)
  with cd.unlocked():
    cd.prompts_per_step, cd.n, cd.num_minibatches = 8, 4, num_minibatches
    cd.max_prompt_len, cd.max_response_len = 40, 16
    cd.optimizer.lr = 1e-3
    if micro_batch_tokens is not None:
      cd.perf.micro_batch_tokens = micro_batch_tokens
  cfg = config_lib.from_config_dict(cd)
  models = tiny_pair.make_models()
  policies = {name: make_policy(name, *models[key], cfg.optimizer, cfg.data.prompt_suffix)
              for name, key in zip(names, "ab")}
  per_step = collections.Counter()
  step = [0]

  def count(event, duration, **kwargs):
    if event == COMPILE_EVENT:
      per_step[step[0]] += 1

  monitoring.register_event_duration_secs_listener(count)
  lengths, records = set(), []
  data = problems(steps * 8)
  try:
    for s in range(steps):
      step[0] = s
      metrics, rolls = train_step(cfg, policies, data[s * 8:(s + 1) * 8],
                                  tiny_pair.contains_reward, s,
                                  jax.random.fold_in(jax.random.key(0), s))
      records.append(metrics)
      for roll in rolls.values():
        p, r = [len(x) for x in roll.prompt_ids], roll.batch.lengths_B
        lengths.add((min(p), max(p), int(r.min()), int(r.max())))
  finally:
    monitoring.unregister_event_duration_listener(count)
  return per_step, lengths, records


def test_graft_with_two_minibatches_compiles_only_in_its_first_step():
  """With two minibatches the own rows' old log-probs are scored after the rows are
  built, only where a row has a loss term (`graft_jax.train.old_logprobs`): a
  model whose own groups are all silent in step 0 first runs that scorer later.
  So the count starts after the first step in which both models scored rows."""
  per_step, lengths, records = run("graft", 2, ("toy_a", "toy_b"))
  assert len(lengths) > 5  # the lengths did vary
  assert sum(r[n]["exchange"].get("grafted_groups", 0) for r in records for n in ("toy_a", "toy_b"))
  assert per_step[0] > 0
  first = max(min(s for s, r in enumerate(records) if r[n]["old_logp_rows_scored"])
              for n in ("toy_a", "toy_b"))
  assert first <= 2, first
  assert {s: c for s, c in per_step.items() if s > first} == {}


def test_grpo_with_the_old_logprobs_in_the_update_compiles_only_in_its_first_step():
  per_step, lengths, records = run("grpo", 1, ("toy_a",))
  assert len(lengths) > 5
  assert {s: c for s, c in per_step.items() if s > 0} == {}
  for r in records:  # no separate pass: the update compares its forward with the sampler's
    assert r["toy_a"]["old_logp_rows_scored"] == 0
    assert r["toy_a"]["old_logp"]["calls"] == 0 and r["toy_a"]["old_logp"]["computed_tokens"] == 0
  # ... over the rows it ran: a step whose groups were all silent (skip_silent_rows) has none.
  gaps = [r["toy_a"]["logp_mismatch_max"] for r in records if "logp_mismatch_max" in r["toy_a"]]
  assert len(gaps) > STEPS // 2 and max(gaps) < 1e-4


def test_the_second_step_of_a_run_with_default_settings_compiles_nothing():
  """The toy's GRPO with the default micro-batch budget (the backend's): every update
  program compiles in the first step, whatever lengths the second brings."""
  per_step, _, _ = run("grpo", 1, ("toy_a",), steps=2, micro_batch_tokens=0)
  assert per_step[0] > 0 and per_step[1] == 0
