"""Two GRAFT steps end to end with a vLLM sidecar per model (different tokenizers): the
trainer's old-policy log-probs equal vLLM's, each update reaches the server, and the models
sample side by side with the results of sampling in turn."""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from configs import toy
from graft_jax.config import run_config as config_lib
from graft_jax.rollout.vllm_sidecar import RequestError
from graft_jax.outputs import peer_log
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train.collect import collect_all
from graft_jax.train.policy import make_policy
from graft_jax.train.setup import attach_engines
from graft_jax.train.trainer import Trainer
from graft_jax.train.validation import Validator
from tests.train import tiny_pair

pytestmark = pytest.mark.slow


def _cfg(workdir, **fields):
  cd = toy.get_config("graft")
  cd.unlock()
  cd.workdir = str(workdir)
  cd.engine = "vllm"
  cd.prompts_per_step, cd.n, cd.num_minibatches, cd.max_response_len = 8, 4, 2, 8
  cd.logging.progress_bar = cd.logging.tensorboard = False
  cd.optimizer.lr = 1e-3
  cd.checkpoint.every_steps = 1
  # Every row runs and is scored, so each step measures the sampler / trainer gap
  # (a step whose groups are all silent would measure no token).
  cd.skip_silent_rows = False
  for dotted, value in fields.items():
    *path, last = dotted.split(".")
    setattr(functools.reduce(getattr, path, cd), last, value)
  return config_lib.from_config_dict(cd)


def check_served(workdir, served) -> list[dict]:
  """Two steps' records, each showing every server in step with its trainer and sampling
  alongside the others; returns them."""
  records = read_jsonl(workdir / "metrics.jsonl")
  assert [r["step"] for r in records] == [0, 1]
  for r in records:
    assert overlap(r, "time/{}/sample_start_s", "time/{}/sample_end_s", served) > 0
    for name in served:
      # vLLM's generation log-probs are the trainer's old-policy log-probs.
      assert r[f"{name}/logp_mismatch_max"] < 1e-4
      assert r[f"{name}/update/vllm_write_s"] > 0 and r[f"{name}/update/vllm_reload_s"] > 0
      assert r[f"{name}/update/vllm_probe_max_abs"] < 1e-4
  return records


def overlap(timings: dict, start: str, end: str, names) -> float:
  """Seconds during which every model in ``names`` was sampling (<= 0: none)."""
  return (min(timings[end.format(n)] for n in names)
          - max(timings[start.format(n)] for n in names))


def _policies(vllm_pair, cfg) -> dict:
  """The session's servers as the engines of two policies (their fixture weights)."""
  return {name: dataclasses.replace(
              make_policy(name, model, tok, cfg.optimizer, cfg.data.prompt_suffix), engine=engine)
          for name, (engine, model, tok) in vllm_pair.items()}


def test_models_sample_side_by_side_with_the_results_of_taking_turns(vllm_pair, tmp_path):
  problems, seeds = tiny_pair.problems(8), {"a": 3, "b": 4}
  runs = {}
  for mode in ("on", "off"):
    cfg = _cfg(tmp_path / mode, **{"rollout.concurrent": mode})
    timings = {}
    rolls = collect_all(_policies(vllm_pair, cfg), problems, cfg, tiny_pair.contains_reward,
                        seeds, timings)
    assert list(rolls) == ["a", "b"]
    runs[mode] = rolls, timings
  (side, t_side), (turns, t_turns) = runs["on"], runs["off"]
  assert overlap(t_side, "{}/sample_start_s", "{}/sample_end_s", "ab") > 0
  assert t_turns["a/sample_end_s"] <= t_turns["b/sample_start_s"]
  for name in "ab":
    assert side[name].response_ids == turns[name].response_ids
    np.testing.assert_array_equal(side[name].rewards_GxN, turns[name].rewards_GxN)
    # Each server batches requests as they arrive, which may move fp32 log-probs in
    # their last bits between two runs; the tokens and rewards are exact.
    np.testing.assert_allclose(side[name].gen_mean_logp_B, turns[name].gen_mean_logp_B,
                               rtol=0, atol=1e-5)
  assert side["a"].response_ids != side["b"].response_ids


def test_models_validate_side_by_side_with_the_numbers_of_taking_turns(vllm_pair, tmp_path):
  cfg = _cfg(tmp_path, max_response_len=16)
  policies, runs = _policies(vllm_pair, cfg), {}
  for mode in ("on", "off"):
    validator = Validator({"say": tiny_pair.problems(8, seed=9), "more": tiny_pair.problems(4)},
                          every_steps=1, k=2, temperature=1.0, top_p=1.0, seed=cfg.seed,
                          max_new_tokens=cfg.max_response_len,
                          prompt_suffix=cfg.data.prompt_suffix,
                          score_fn=tiny_pair.contains_reward, batch_size=4, concurrent=mode)
    runs[mode] = validator.run(policies, 0), validator.history
  (side, side_history), (turns, turn_history) = runs["on"], runs["off"]
  flat = lambda out: {f"{n}/{k}": v for n, m in out.items() for k, v in m.items()}
  assert overlap(flat(side), "{}/start_s", "{}/end_s", "ab") > 0
  assert turns["a"]["end_s"] <= turns["b"]["start_s"]
  timing = ("seconds", "start_s", "end_s")
  for name in "ab":
    assert set(side[name]) == {"say", "more", "average", *timing}
    assert ({k: v for k, v in side[name].items() if k not in timing}
            == {k: v for k, v in turns[name].items() if k not in timing})
  assert side_history == turn_history


def test_a_failure_in_one_sampling_thread_is_raised_as_it_was(vllm_pair, tmp_path):
  """Responses longer than the servers' context (256): vLLM refuses each request (HTTP 400)."""
  cfg = _cfg(tmp_path, **{"rollout.concurrent": "on", "max_response_len": 300})
  with pytest.raises(RequestError, match=r"^[ab]: /v1/completions -> HTTP 400"):
    collect_all(_policies(vllm_pair, cfg), tiny_pair.problems(2), cfg, tiny_pair.contains_reward,
                {"a": 0, "b": 1}, {})


def test_two_graft_steps_with_vllm_engines(vllm_pair, tmp_path):
  cfg = _cfg(tmp_path)
  models = {cfg.model_a.name: vllm_pair["a"][1:], cfg.model_b.name: vllm_pair["b"][1:]}
  trainer = Trainer(cfg, tiny_pair.problems(), models, reward_fn=tiny_pair.contains_reward)
  served = {cfg.model_a.name: vllm_pair["a"][0], cfg.model_b.name: vllm_pair["b"][0]}
  def reuse(name, model, tokenizer):  # the session's servers stand in for fresh ones
    engine = served[name]
    engine.set_weights(model)
    return engine
  attach_engines(trainer, reuse)
  start = {n: jax.tree.leaves(p.params)[0].copy() for n, p in trainer.policies.items()}
  try:
    trainer.run(2)
  finally:
    trainer.close()  # vllm_pair gives the servers their weights back

  check_served(tmp_path, served)
  for name, p in trainer.policies.items():
    assert not np.allclose(jax.tree.leaves(p.params)[0], start[name])  # it did train
    table = peer_log.PeerLogReader(tmp_path / "peer_logs", name).load_step(1).to_pylist()
    assert len(table) == cfg.prompts_per_step * cfg.n


def test_three_models_each_with_its_own_vllm_sidecar(vllm_pair, tmp_path):
  """K = 3 under engine=vllm: a third server (another qwen3-like policy) next to the session's
  two; every policy's old log-probs equal its server's, and every update reaches it."""
  from configs import base
  from graft_jax.rollout.vllm_engine import VLLMEngine
  import vllm_fixtures
  import vllm_models

  third_model, third_tok = vllm_models.make_pair(seed=7)["a"]
  third = VLLMEngine(third_model, eos_ids=third_tok.eos_token_id, pad_id=third_tok.pad_token_id,
                     run_dir=tmp_path / "vllm_c", options=vllm_fixtures.options(), name="c",
                     check_every=1)
  cd = toy.get_config("graft")
  cd.unlock()
  base.set_models(cd, [("unused/a", "a"), ("unused/b", "b"), ("unused/c", "c")])
  cd.workdir = str(tmp_path)
  cd.engine = "vllm"
  cd.prompts_per_step, cd.n, cd.num_minibatches, cd.max_response_len = 8, 4, 2, 8
  cd.logging.progress_bar = cd.logging.tensorboard = False
  cd.optimizer.lr = 1e-3
  cd.skip_silent_rows = False  # every step measures every policy's gap (see _cfg)
  cfg = config_lib.from_config_dict(cd)
  served = {"a": vllm_pair["a"][0], "b": vllm_pair["b"][0], "c": third}
  models = {"a": vllm_pair["a"][1:], "b": vllm_pair["b"][1:], "c": (third_model, third_tok)}
  trainer = Trainer(cfg, tiny_pair.problems(), models, reward_fn=tiny_pair.contains_reward)
  def reuse(name, model, tokenizer):
    served[name].set_weights(model)
    return served[name]
  try:
    attach_engines(trainer, reuse)
    trainer.run(2)
  finally:
    trainer.close()
    third.close()
  for r in check_served(tmp_path, served):
    assert "a/exchange/from/c/candidates" in r  # the K-model exchange ran
