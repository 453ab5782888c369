"""Prompt templates: problem text -> model input text.

The paper's template is the default. A template is a string with exactly one
``{problem}`` slot; it is filled by plain replacement, not ``str.format``,
because math prompts contain literal braces (``\\boxed{}``).
"""

from __future__ import annotations

import dataclasses

from graft_jax.data.problem import Problem

PAPER_TEMPLATE = ("{problem} Let's think step by step and output the final "
                  "answer within \\boxed{}.")
# Registered names, so a config can say template="plain".
TEMPLATES = {
    "paper": PAPER_TEMPLATE,
    "plain": "{problem}",
    # The toy pair (graft_jax/toy) is warm-started on "<problem> Answer: <trace>".
    "toy": "{problem} Answer:",
}
_SLOT = "{problem}"


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
  """A per-model prompt template; see the module docstring."""

  template: str = PAPER_TEMPLATE

  def __post_init__(self):
    if self.template.count(_SLOT) != 1:
      raise ValueError(
          f"prompt template must contain {_SLOT!r} exactly once, got "
          f"{self.template!r}")

  @classmethod
  def named(cls, name_or_template: str) -> "PromptTemplate":
    """A registered template by name, or the given string as a template."""
    return cls(TEMPLATES.get(name_or_template, name_or_template))

  def render(self, problem: Problem | str) -> str:
    text = problem if isinstance(problem, str) else problem.problem  # any object with .problem
    return self.template.replace(_SLOT, text)
