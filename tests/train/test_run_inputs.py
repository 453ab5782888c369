"""A run's inputs are checked and counted before a model loads; prompt limits hold before sampling."""

import json
import logging
import types

import pytest

from graft_jax.data import DataError, Problem
from graft_jax.train import run_inputs, setup
from graft_jax.train import trainer as trainer_lib
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg

GOOD = [{"problem": f"What is {i}+1?", "answer": str(i + 1)} for i in range(10)]


def _file_cfg(tmp_path, body: bytes, **extra):
  path = tmp_path / "train.jsonl"
  path.write_bytes(body)
  return make_cfg("graft", tmp_path / "run", **{"data.source": "file",
                                                "data.train_path": str(path), **extra})


@pytest.fixture
def no_models(monkeypatch):
  """Fails the test if anything gets as far as building or loading a model."""
  def fail(*args, **kwargs):
    raise AssertionError("a model was loaded before the inputs were checked")
  monkeypatch.setattr(setup, "load_models", fail)


def test_an_empty_training_file_is_named_before_any_model_loads(tmp_path, no_models):
  cfg = _file_cfg(tmp_path, b"")
  with pytest.raises(DataError, match=rf"{tmp_path}/train.jsonl: file: .*the file is empty"):
    setup.build_trainer(cfg, reward_fn=tiny_pair.contains_reward)


def test_all_rows_malformed_and_too_few_problems_are_named_before_models(tmp_path, no_models):
  cfg = _file_cfg(tmp_path, b'{"question": 1}\n\xff\n', **{"data.skip_malformed": True})
  with pytest.raises(DataError, match=r"train.jsonl: file: .*all 2 rows were skipped"):
    setup.build_trainer(cfg, reward_fn=tiny_pair.contains_reward)
  cfg = _file_cfg(tmp_path, b"".join(json.dumps(r).encode() + b"\n" for r in GOOD[:3]))
  with pytest.raises(DataError, match=r"3 usable training problems .* prompts_per_step=8"):
    setup.build_trainer(cfg, reward_fn=tiny_pair.contains_reward)


def test_skipped_rows_are_counted_by_reason(tmp_path):
  body = b"".join(json.dumps(r).encode() + b"\n" for r in GOOD)
  body += b'{"problem": "caf\xe9", "answer": "1"}\n{"answer": "2"}\n{"problem": "p"\n'
  cfg = _file_cfg(tmp_path, body, **{"data.skip_malformed": True})
  problems, counts = run_inputs.load_training_problems(cfg)
  assert len(problems) == 10
  assert counts == {"rows": 13, "loaded": 10, "skipped/encoding": 1, "skipped/problem": 1,
                    "skipped/json": 1}
  with pytest.raises(DataError, match="line 11: field 'problem': not valid UTF-8"):
    run_inputs.load_training_problems(_file_cfg(tmp_path, body))


@pytest.fixture(scope="module")
def policies():
  """What drop_too_long reads of a policy: its tokenizer and prompt suffix."""
  return {"a": types.SimpleNamespace(tokenizer=tiny_pair.make_tokenizer(280), prompt_suffix=" Answer:"),
          "b": types.SimpleNamespace(tokenizer=tiny_pair.make_tokenizer(320), prompt_suffix=" Answer:")}


def _lengths(policies, text):
  return {n: len(p.tokenizer.encode(text + p.prompt_suffix, add_special_tokens=False))
          for n, p in policies.items()}


def test_prompts_over_max_prompt_len_are_skipped_and_counted(policies, caplog):
  long_text = "Say a. " * 40
  problems = [Problem("short", "Say b.", "b", "t"), Problem("long", long_text, "a", "t")]
  want = _lengths(policies, long_text)
  limit = max(_lengths(policies, "Say b.").values())
  with caplog.at_level(logging.WARNING):
    kept, dropped = run_inputs.drop_too_long(problems, policies, max_len=limit, mode="skip",
                                             source="train.jsonl")
  assert [p.id for p in kept] == ["short"] and dropped == 1
  assert f"skipped 1 of 2 training problems" in caplog.text
  assert f"(longest {max(want.values())})" in caplog.text
  # The limit is inclusive, and counts the template's suffix.
  kept, dropped = run_inputs.drop_too_long(problems, policies, max_len=max(want.values()),
                                           mode="skip", source="x")
  assert dropped == 0


def test_too_long_error_mode_names_the_problem_and_its_length(policies):
  problems = [Problem("p-7", "Say c. " * 30, "c", "t")]
  n = max(_lengths(policies, problems[0].problem).values())
  with pytest.raises(DataError, match=rf"train.jsonl: problem p-7: field 'problem': the prompt is "
                     rf"{n} tokens for \w+ .*max_prompt_len=10 \(1 of the 1 training problems exceed it\); "
                     r"set data.too_long=skip"):
    run_inputs.drop_too_long(problems, policies, max_len=10, mode="error", source="train.jsonl")


def test_the_reward_pool_has_reward_num_workers_processes(tmp_path):
  cfg = make_cfg("graft", tmp_path, **{"reward.num_workers": 1})
  pool = trainer_lib.make_reward_pool(cfg)
  try:
    assert len(pool.worker_pids) == pool.num_workers == 1
    used = []
    run = pool.run
    pool.run = lambda items, **kw: used.append(len(items)) or run(items, **kw)
    rewards, _ = trainer_lib.config_reward(cfg, pool)(["\\boxed{x+1}", "\\boxed{3}"], ["1+x", "4"])
    assert list(rewards) == [1.0, 0.0] and used == [1]  # 3 vs 4 is decided without sympy
  finally:
    pool.close()
