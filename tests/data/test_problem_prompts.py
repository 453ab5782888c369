"""Problem ids and prompt templates."""

import pytest

from graft_jax.data import PAPER_TEMPLATE, Problem, PromptTemplate, stable_id


def test_stable_id_is_deterministic_and_source_scoped():
  a = stable_id("MATH500", "What is 1+1?")
  assert a == stable_id("MATH500", "What is 1+1?")
  assert len(a) == 16 and int(a, 16) >= 0
  assert a != stable_id("AIME24", "What is 1+1?")
  assert a != stable_id("MATH500", "What is 1+2?")
  # Pinned: ids must not change between releases (they key stored results).
  assert stable_id("synthetic", "Compute 1+1.") == "ace8fec0d5b63c98"


def test_paper_template_is_the_default():
  p = Problem(id="x", problem="Find $x$ if $x+1=2$.", answer="1", source="t")
  want = ("Find $x$ if $x+1=2$. Let's think step by step and output the final "
          "answer within \\boxed{}.")
  assert PromptTemplate().render(p) == want
  assert PromptTemplate().template == PAPER_TEMPLATE


def test_templates_are_configurable_and_brace_safe():
  t = PromptTemplate("<|user|>{problem}\\boxed{} please<|assistant|>")
  assert t.render("Q{1}") == "<|user|>Q{1}\\boxed{} please<|assistant|>"
  assert PromptTemplate.named("plain").render("Q") == "Q"
  assert PromptTemplate.named("Question: {problem}\n").render("Q") == "Question: Q\n"


@pytest.mark.parametrize("bad", ["no slot", "{problem} {problem}"])
def test_bad_template(bad):
  with pytest.raises(ValueError, match="exactly once"):
    PromptTemplate(bad)


def test_problem_row_round_trip():
  p = Problem(id="i", problem="q", answer="1", source="s", family="add")
  assert p.to_row() == {"id": "i", "problem": "q", "answer": "1", "source": "s",
                        "family": "add"}
