"""Validation during training: the suite it builds, when it runs, what it measures, and that
it leaves training untouched."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.config import run_config as config_lib
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train.setup import load_train_problems
from graft_jax.train.trainer import Trainer
from graft_jax.train.validation import Validator, eval_suite
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg


def _toy_cfg(**eval_fields):
  cd = config_lib.load_config("configs/toy.py:graft")
  with cd.unlocked():
    cd.eval.update(eval_fields)
  return config_lib.from_config_dict(cd)


def test_synthetic_suite_is_one_benchmark_per_family_and_never_trained_on():
  cfg = _toy_cfg(max_examples=40)
  train = load_train_problems(cfg)
  suite = eval_suite(cfg, train)
  assert list(suite) == ["synthetic/cadd", "synthetic/cmul"]
  seen = {p.problem for p in train}
  for name, problems in suite.items():
    assert len(problems) == 40 and {p.family for p in problems} == {name.split("/")[1]}
    assert not seen & {p.problem for p in problems}
    assert len({p.problem for p in problems}) == 40
  # The same config gives the same suite (every method validates on the same problems).
  assert [p.problem for p in eval_suite(cfg, train)["synthetic/cmul"]] == [
      p.problem for p in suite["synthetic/cmul"]]


def test_file_suite_reads_data_dir_and_names_what_is_missing(tmp_path):
  rows = [{"problem": f"What is {i}+1?", "answer": str(i + 1)} for i in range(5)]
  (tmp_path / "math500.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  suite = eval_suite(_toy_cfg(suite=("math500",), data_dir=str(tmp_path), max_examples=3))
  assert list(suite) == ["math500"]
  assert [p.answer for p in suite["math500"]] == ["1", "2", "3"]
  with pytest.raises(FileNotFoundError, match=r"'aime24'.*aime24.jsonl.*eval.data_dir"):
    eval_suite(_toy_cfg(suite=("math500", "aime24"), data_dir=str(tmp_path)))
  with pytest.raises(FileNotFoundError, match="eval.data_dir is not set"):
    eval_suite(_toy_cfg(suite=("math500",), data_dir=""))


def test_an_empty_suite_is_a_config_error():
  with pytest.raises(config_lib.ConfigError, match="eval.suite is empty"):
    _toy_cfg(suite=())
  assert Validator.from_config(_toy_cfg(every_steps=0, suite=()), None) is None


def test_due_every_k_steps_and_after_the_last():
  v = Validator({}, every_steps=2, k=1, temperature=1.0, top_p=1.0, seed=0, max_new_tokens=1,
                prompt_suffix="", score_fn=None)
  assert [s for s in range(5) if v.due(s, 5)] == [1, 3, 4]


def _validator(cfg, eval_problems):
  return Validator({"say": eval_problems}, every_steps=2, k=3, temperature=1.0, top_p=1.0,
                   seed=cfg.seed, max_new_tokens=cfg.max_response_len,
                   prompt_suffix=cfg.data.prompt_suffix, score_fn=tiny_pair.contains_reward)


def _run(workdir, steps, validator=None):
  cfg = make_cfg("graft", workdir)
  trainer = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(),
                    reward_fn=tiny_pair.contains_reward,
                    validator=validator(cfg) if validator else None)
  trainer.run(steps)
  trainer.close()
  return cfg, trainer


def _pass1_by_hand(policy, problems, cfg, k, seed):
  """Sampling the final weights afresh and counting the gold character in each response."""
  tok = policy.tokenizer
  engine = JaxSamplerEngine(policy.model, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id)
  prompts = [tok.encode(p.problem + cfg.data.prompt_suffix, add_special_tokens=False)
             for p in problems]
  batch = engine.generate(prompts, k, SamplingParams(max_new_tokens=cfg.max_response_len,
                                                     temperature=1.0, top_p=1.0, seed=seed))
  hits = [problems[i].answer in tok.decode(batch.response_ids(b), skip_special_tokens=True)
          for b, i in enumerate(batch.prompt_index_B)]
  return float(np.mean(hits))


@pytest.mark.slow
def test_validation_measures_the_current_weights_and_leaves_training_unchanged(tmp_path):
  eval_problems = tiny_pair.problems(12, seed=99)
  _, plain = _run(tmp_path / "plain", 3)
  cfg, checked = _run(tmp_path / "checked", 3, lambda c: _validator(c, eval_problems))
  plain_records = read_jsonl(tmp_path / "plain" / "metrics.jsonl")
  records = read_jsonl(tmp_path / "checked" / "metrics.jsonl")
  names = list(checked.policies)
  # After step 1 (every 2 steps) and after the last step, for both policies.
  for r in records:
    has = {f"{n}/eval/average" in r for n in names}
    assert has == ({True} if r["step"] in (1, 2) else {False})
  # Training itself is the same, to the bit.
  drop = lambda r: {k: v for k, v in r.items() if not k.startswith("time") and "/eval/" not in k
                       and not k.endswith("device_s")}  # wall time x devices
  assert [drop(r) for r in records] == [drop(r) for r in plain_records]
  for n in names:
    for x, y in zip(jax.tree.leaves(plain.policies[n].params),
                    jax.tree.leaves(checked.policies[n].params)):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  # The last validation is pass@1 of the final weights.
  seed = checked.validator.seed + 10_000
  for n in names:
    want = _pass1_by_hand(checked.policies[n], eval_problems, cfg, 3, seed)
    assert records[-1][f"{n}/eval/say"] == pytest.approx(want, abs=1e-12)
    assert records[-1][f"{n}/eval/average"] == records[-1][f"{n}/eval/say"]
    history = checked.validator.history[n]
    assert history == [(1, records[1][f"{n}/eval/average"]), (2, records[2][f"{n}/eval/average"])]
    assert checked.validator.best()[n] == max(history, key=lambda x: (x[1], -x[0]))


@pytest.mark.slow
def test_a_resumed_run_keeps_its_validation_history(tmp_path):
  eval_problems = tiny_pair.problems(12, seed=99)
  _, first = _run(tmp_path, 2, lambda c: _validator(c, eval_problems))
  before = {n: list(h) for n, h in first.validator.history.items()}
  _, resumed = _run(tmp_path, 3, lambda c: _validator(c, eval_problems))
  for n, h in resumed.validator.history.items():
    assert h[:1] == before[n] and [s for s, _ in h] == [1, 2]


def test_validator_config_follows_the_run():
  cfg = _toy_cfg(k=2, max_examples=4, temperature=0.6, top_p=0.95)
  v = Validator.from_config(cfg, tiny_pair.contains_reward)
  assert (v.every_steps, v.k, v.temperature, v.top_p) == (5, 2, 0.6, 0.95)
  assert v.concurrent == cfg.rollout.concurrent == "auto"  # side by side as the rollouts
  assert v.max_new_tokens == cfg.max_response_len and v.prompt_suffix == " Answer:"
  assert sum(len(p) for p in v.suite.values()) == 4 * len(cfg.data.synthetic.families)
  assert dataclasses.replace(v, every_steps=3).due(2, 100)
