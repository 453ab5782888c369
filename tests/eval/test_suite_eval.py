"""evaluate() with a deterministic engine that replays fixed strings; the
reward and the aggregation under test are the real ones."""

import json
import logging

import numpy as np
import pytest

from graft_jax.data import Problem, PromptTemplate
from graft_jax.eval import evaluate
from graft_jax.rollout.types import RolloutBatch, SamplingParams


class CharTokenizer:
  """One token per character (id = code point); no special tokens."""

  def encode(self, text, add_special_tokens=False):
    del add_special_tokens
    return [ord(ch) for ch in text]

  def decode(self, ids, skip_special_tokens=True):
    del skip_special_tokens
    return "".join(chr(i) for i in ids)


class ReplayEngine:
  """Replies to a prompt with scripted responses, looked up by prompt text."""

  def __init__(self, script):
    self.script = script  # prompt text -> list of k response strings
    self.calls = []

  def generate(self, prompts, n, params):
    self.calls.append((len(prompts), n, params))
    texts, index = [], []
    for i, ids in enumerate(prompts):
      responses = self.script["".join(chr(t) for t in ids)]
      assert len(responses) == n
      texts += responses
      index += [i] * n
    length = max(len(t) for t in texts)
    tokens = np.zeros((len(texts), length), np.int32)
    mask = np.zeros((len(texts), length), bool)
    for b, t in enumerate(texts):
      tokens[b, :len(t)] = [ord(ch) for ch in t]
      mask[b, :len(t)] = True
    return RolloutBatch(
        tokens_BxL=tokens, mask_BxL=mask, logp_BxL=np.zeros(tokens.shape, np.float32),
        finished_B=np.ones(len(texts), bool),
        truncated_B=np.array([t.endswith("...") for t in texts]),
        prompt_index_B=np.array(index, np.int32), n=n)

  def set_weights(self, model):
    del model


def _problem(source, i, question, answer):
  return Problem(id=f"{source}-{i}", problem=question, answer=answer, source=source)


@pytest.fixture
def setup():
  template = PromptTemplate()
  suite = {
      "ALPHA": [_problem("ALPHA", 0, "Compute 2+2.", "4"),
                _problem("ALPHA", 1, "Half of one?", "\\frac{1}{2}"),
                _problem("ALPHA", 2, "Root of 8?", "2\\sqrt{2}")],
      "BETA": [_problem("BETA", 0, "Compute 3*3.", "9")],
  }
  # k = 4 replies per problem; correct counts 3, 4, 0 and 1.
  replies = {
      "Compute 2+2.": ["\\boxed{4}", "so 4", "\\boxed{4.0}", "\\boxed{5}"],
      "Half of one?": ["\\boxed{0.5}", "\\boxed{\\frac{2}{4}}", "\\boxed{1/2}",
                       "\\boxed{\\dfrac{1}{2}}"],
      "Root of 8?": ["\\boxed{3}", "no idea", "\\boxed{\\sqrt{7}}", "long..."],
      "Compute 3*3.": ["\\boxed{9}", "\\boxed{6}", "\\boxed{33}", "\\boxed{}"],
  }
  script = {template.render(q): r for q, r in replies.items()}
  return suite, ReplayEngine(script)


def test_pass_at_k_and_average(setup, tmp_path):
  suite, engine = setup
  sampling = SamplingParams(max_new_tokens=16, temperature=0.6, top_p=0.95, seed=5)
  report = evaluate(engine, CharTokenizer(), suite, k=4, sampling=sampling,
                    batch_size=2, ks=(1, 2, 4))
  alpha, beta = report.results
  assert alpha.num_correct == {"ALPHA-0": 3, "ALPHA-1": 4, "ALPHA-2": 0}
  assert alpha.pass_at[1] == pytest.approx((3 / 4 + 1 + 0) / 3)
  assert alpha.pass_at[2] == pytest.approx((1 + 1 + 0) / 3)  # 1 - C(1,2)/C(4,2)
  assert alpha.pass_at[4] == pytest.approx(2 / 3)
  assert beta.pass_at[1] == pytest.approx(0.25)
  assert beta.pass_at[2] == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
  assert report.average[1] == pytest.approx(((3 / 4 + 1) / 3 + 0.25) / 2)
  assert alpha.stats.no_boxed == 3 and alpha.truncated_frac == pytest.approx(1 / 12)
  # Engine calls: batches of <= 2 prompts, k samples, the paper's sampling,
  # a fresh seed per call.
  assert [(p, n) for p, n, _ in engine.calls] == [(2, 4), (1, 4), (1, 4)]
  assert [s.seed for _, _, s in engine.calls] == [5, 6, 5]
  assert engine.calls[0][2].temperature == 0.6 and engine.calls[0][2].top_p == 0.95

  path = tmp_path / "out" / "eval.json"
  report.write_json(path)
  data = json.loads(path.read_text())
  assert data["benchmarks"]["BETA"]["pass_at"]["1"] == pytest.approx(0.25)
  assert data["average"]["1"] == pytest.approx(report.average[1])
  table = report.table()
  assert "pass@4" in table and "ALPHA" in table and "average" in table
  assert f"{100 * report.average[1]:.2f}" in table


def test_engine_protocol_violation_is_caught(setup):
  suite, engine = setup
  real = engine.generate

  def drops_a_row(prompts, n, params):
    batch = real(prompts, n, params)
    return RolloutBatch(batch.tokens_BxL[:-1], batch.mask_BxL[:-1],
                        batch.logp_BxL[:-1], batch.finished_B[:-1],
                        batch.truncated_B[:-1], batch.prompt_index_B[:-1], n)

  engine.generate = drops_a_row
  with pytest.raises(ValueError, match="engine returned"):
    evaluate(engine, CharTokenizer(), suite, k=4)


def test_bad_arguments(setup):
  suite, engine = setup
  with pytest.raises(ValueError, match="pass@k"):
    evaluate(engine, CharTokenizer(), suite, k=4, ks=(8,))
  with pytest.raises(ValueError, match="no problems"):
    evaluate(engine, CharTokenizer(), {"EMPTY": []}, k=4)


def test_one_log_line_per_benchmark_unless_asked_not_to(setup, caplog):
  # A training run's validation reports through the progress bar; standalone eval logs each.
  suite, engine = setup
  with caplog.at_level(logging.INFO):
    evaluate(engine, CharTokenizer(), suite, k=4)
  lines = [r.getMessage() for r in caplog.records if "pass@1" in r.getMessage()]
  assert [line.split(":")[0] for line in lines] == ["ALPHA", "BETA"]
  caplog.clear()
  with caplog.at_level(logging.INFO):
    evaluate(engine, CharTokenizer(), suite, k=4, log_each=False)
  assert not [r for r in caplog.records if "pass@1" in r.getMessage()]


def test_whole_suite_in_one_engine_call(setup):
  """batch_size=0: one call over every benchmark's problems, scored as per benchmark."""
  suite, engine = setup
  sampling = SamplingParams(max_new_tokens=16, temperature=0.6, top_p=0.95, seed=5)
  report = evaluate(engine, CharTokenizer(), suite, k=4, sampling=sampling, batch_size=0,
                    ks=(1, 2, 4))
  assert [(p, n, s.seed) for p, n, s in engine.calls] == [(4, 4, 5)]
  alpha, beta = report.results
  assert alpha.num_correct == {"ALPHA-0": 3, "ALPHA-1": 4, "ALPHA-2": 0}
  assert beta.num_correct == {"BETA-0": 1}
  assert beta.pass_at[2] == pytest.approx(0.5)
  assert alpha.truncated_frac == pytest.approx(1 / 12) and beta.truncated_frac == 0
