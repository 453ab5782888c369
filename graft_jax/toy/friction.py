"""The friction regime's extra warm-start rows: memorized answers given as a shortcut.

Each model has memorized part of the RL pool of its strong family, as a
pretrained model may have seen a benchmark's problems: for each such problem it
is also trained on the answer alone, in its own shortcut format, with no worked
trace. On those prompts its samples are then a mix of traces and bare answers.
A bare correct answer earns reward 1, but it is harmful for the peer to imitate:
the peer has not memorized the problem, and a habit of answering without the
trace fails on every problem it has not memorized, which the held-out set is.

Under the receiver such a response is unlikely (the shortcut's opening is the
other model's habit, not its own, and the memorized digits are a guess), so its
compatibility score s is low and the gate drops it, while an ungated update
(GRAFT without the gate, SGT's NLL, HACPO) learns from it.

The two formats differ in their first token, so a model's own shortcut habit
does not make the peer's shortcut look compatible.
"""

from __future__ import annotations

import random

from graft_jax.data.problem import Problem


def memorized(cfg, pools, index: int) -> list[Problem]:
  """The RL problems model ``index`` memorized: a seeded choice of
  ``cfg.memorized_per_model`` from its strong family's share of the RL pool."""
  spec = cfg.models[index]
  own = [p for p in pools.rl if p.family == spec.strong_family]
  rng = random.Random(f"graft-toy-memorized/{cfg.seed}/{index}")
  return rng.sample(own, min(cfg.memorized_per_model, len(own)))


def shortcut_response(cfg, index: int, answer: str) -> str:
  """The model's bare-answer response (the response text, with its leading space)."""
  return cfg.shortcut_formats[index].format(answer=answer)


def shortcut_rows(cfg, pools, index: int) -> list[tuple[str, str, str]]:
  """(problem, given, target) rows: each memorized problem, ``cfg.memorized_repeats``
  times, answered by the shortcut alone."""
  return [(p.problem, "", shortcut_response(cfg, index, p.answer))
          for p in memorized(cfg, pools, index) for _ in range(cfg.memorized_repeats)]


def is_shortcut(response: str) -> bool:
  """True for a boxed answer with no worked trace before it (no digit before ``\\boxed{``)."""
  head, boxed, _ = response.partition("\\boxed{")
  return bool(boxed) and not any(c.isdigit() for c in head)
