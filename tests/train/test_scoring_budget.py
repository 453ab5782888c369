"""score_rows packs rows under a token budget: the log-probs of each row alone, in passes of
one shape."""

import numpy as np
import pytest
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models import token_logprobs_jit
from graft_jax.models.decoder import init_model
from graft_jax.train import row_logprobs

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
  real = row_logprobs.token_logprobs_jit

  def spy(model, ids, mask, **kw):
    shapes.append(ids.shape)
    return real(model, ids, mask, **kw)

  monkeypatch.setattr(row_logprobs, "token_logprobs_jit", spy)
  return shapes


def _alone(model, prompts, responses):
  """Each row's response log-probs, scored on its own in an unpadded one-row batch."""
  out = []
  for p, r in zip(prompts, responses):
    ids = np.asarray([p + r], np.int32)
    logp = np.asarray(token_logprobs_jit(model, ids, np.ones_like(ids, bool)))
    out.append(logp[0, len(p):])
  return out


def test_packed_scoring_equals_each_row_alone(passes):
  model = init_model(CFG, rngs=nnx.Rngs(1))
  prompts, responses = _rows()
  want = _alone(model, prompts, responses)
  tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses))
  for budget, rows in ((0, 16), (200, 6), (64, 2), (31, 1)):
    passes.clear()
    got = row_logprobs.score_rows(model, prompts, responses, 0, chunk_rows=16, length_cap=32,
                             token_budget=budget)
    # One shape, and no more calls than the tokens need plus one.
    assert set(passes) == {(rows, 32)}
    assert len(passes) <= -(-tokens // (rows * 32)) + 1
    assert len(got) == len(want)
    for g, w, r in zip(got, want, responses):
      assert len(g) == len(r)
      np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_budget_defaults_to_the_models_score_tokens(passes):
  model = init_model(CFG, rngs=nnx.Rngs(1))
  model.set_memory_options(score_tokens=128)
  prompts, responses = _rows(5)
  row_logprobs.score_rows(model, prompts, responses, 0, length_cap=32)
  assert set(passes) == {(4, 32)}
