"""score_rows under a token budget: the same log-probs, in passes of at most the budget."""

import numpy as np
import pytest
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.train import scoring

CFG = ModelConfig(model_type="qwen3", vocab_size=53, hidden_size=32, intermediate_size=48,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def _rows(num=13, seed=0):
  rng = np.random.default_rng(seed)
  prompts = [rng.integers(1, 53, rng.integers(1, 9)).tolist() for _ in range(num)]
  responses = [rng.integers(1, 53, rng.integers(0, 20)).tolist() for _ in range(num)]
  return prompts, responses


@pytest.fixture
def passes(monkeypatch):
  """The (rows, length) of every scoring pass."""
  shapes = []
  real = scoring.token_logprobs_jit

  def spy(model, ids, mask, **kw):
    shapes.append(ids.shape)
    return real(model, ids, mask, **kw)

  monkeypatch.setattr(scoring, "token_logprobs_jit", spy)
  return shapes


def test_budgeted_scoring_equals_unbudgeted(passes):
  model = init_model(CFG, rngs=nnx.Rngs(1))
  prompts, responses = _rows()
  want = scoring.score_rows(model, prompts, responses, 0, chunk_rows=16, length_cap=32)
  assert passes == [(16, 32)]
  for budget, rows in ((200, 4), (64, 2), (31, 1)):
    passes.clear()
    got = scoring.score_rows(model, prompts, responses, 0, chunk_rows=16, length_cap=32,
                             token_budget=budget)
    assert passes == [(rows, 32)] * -(-13 // rows)
    assert len(got) == len(want)
    for g, w, r in zip(got, want, responses):
      assert len(g) == len(r)
      np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_budget_defaults_to_the_models_score_tokens(passes):
  model = init_model(CFG, rngs=nnx.Rngs(1))
  model.set_memory_options(score_tokens=128)
  prompts, responses = _rows(5)
  scoring.score_rows(model, prompts, responses, 0, length_cap=32)
  assert passes == [(4, 32), (4, 32)]
