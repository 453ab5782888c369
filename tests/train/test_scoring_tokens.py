"""The scoring phases' computed and padding tokens in metrics.jsonl, against a count of
the packed rows each scoring call ran, taken where the rows meet the model."""

import collections

import numpy as np
import pytest

from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train import old_logprobs, row_logprobs
from graft_jax.train import step as step_lib
from graft_jax.train.trainer import Trainer
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

pytestmark = pytest.mark.slow  # a toy run: the trainer's programs compile


def test_a_steps_scoring_tokens_match_the_packed_rows(tmp_path, monkeypatch):
  phase = [None]  # which phase's scoring runs now
  seen = collections.defaultdict(lambda: np.zeros(2, np.int64))  # phase -> (computed, padding)
  real_tokens = collections.Counter()  # phase -> prompt + response tokens of the rows scored
  real_jit, real_collect, real_score = (row_logprobs.token_logprobs_jit, step_lib.collect_all,
                                        old_logprobs.score_own_rows)

  def spy_jit(model, ids_RxL, *args, segment_ids_BxT, **kw):
    seen[phase[0]] += (np.asarray(ids_RxL).size, int((np.asarray(segment_ids_BxT) == 0).sum()))
    return real_jit(model, ids_RxL, *args, segment_ids_BxT=segment_ids_BxT, **kw)

  def collect_then_exchange(*args, **kw):
    out = real_collect(*args, **kw)
    phase[0] = "exchange_scoring"  # the rows are built next
    return out

  def spy_score(policy, rows, method, first_minibatch, cfg):
    phase[0] = f"{policy.name}/old_logp"
    for i in old_logprobs.rows_to_score(rows, method, first_minibatch, cfg):
      real_tokens[phase[0]] += len(rows.prompt_ids[i]) + len(rows.response_ids[i])
    try:
      return real_score(policy, rows, method, first_minibatch, cfg)
    finally:
      phase[0] = None

  monkeypatch.setattr(row_logprobs, "token_logprobs_jit", spy_jit)
  monkeypatch.setattr(step_lib, "collect_all", collect_then_exchange)
  monkeypatch.setattr(old_logprobs, "score_own_rows", spy_score)
  # Two minibatches: the second's own rows are scored before the update.
  cfg = make_cfg("graft", tmp_path, **{"eval.every_steps": 0, "checkpoint.every_steps": 0})
  trainer = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(),
                    reward_fn=tiny_pair.contains_reward)
  trainer.run(1)
  trainer.close()
  (row,) = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "toy_a/update/computed_tokens" in r]

  assert None not in seen  # every scoring call fell in a phase
  for key in ("exchange_scoring", "toy_a/old_logp", "toy_b/old_logp"):
    computed, padding = seen.get(key, (0, 0))
    assert row[f"{key}/computed_tokens"] == computed
    assert row[f"{key}/padding_tokens"] == padding
  assert row["exchange_scoring/computed_tokens"] > 0  # the gate scored peer rows
  for key in ("toy_a/old_logp", "toy_b/old_logp"):
    assert row[f"{key}/computed_tokens"] > 0
    assert row[f"{key}/computed_tokens"] - row[f"{key}/padding_tokens"] == real_tokens[key]
