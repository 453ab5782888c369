"""The slot pool as a run's JAX engine (``rollout.sampler='pool'``): a toy run samples
what the static sampler samples under the same keys, and validation sends the whole
suite per model in one call."""

import jax
import numpy as np
import pytest

from graft_jax.outputs import peer_log
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.rollout import ContinuousSamplerEngine, JaxSamplerEngine, SamplingParams
from graft_jax.train.trainer import Trainer
from graft_jax.train.validation import Validator
from tests.train import tiny_pair
from tests.train.test_trainer_methods import make_cfg


def _cfg(workdir, sampler, **extra):
  # The static sampler on XLA's decode attention: the pool's own (the same products).
  return make_cfg("graft", workdir, **{"rollout.sampler": sampler, "rollout.pool_slots": 8,
                                       "perf.decode_attention": "xla", **extra})


def _responses(workdir, name, step):
  """(prompt, sample, response ids, reward) of each logged row, and its sampler log-probs."""
  table = peer_log.PeerLogReader(workdir / "peer_logs", name).load_step(step).to_pylist()
  return ([(r["prompt_id"], r["sample_index"], list(r["response_ids"]), r["reward"])
           for r in table], np.concatenate([r["logprobs"] for r in table]))


@pytest.mark.slow  # two toy runs of two steps (about a minute on 2 cores)
def test_a_pool_run_trains_on_what_the_static_sampler_draws(tmp_path):
  runs = {}
  for sampler in ("pool", "static"):
    trainer = Trainer(_cfg(tmp_path / sampler, sampler), tiny_pair.problems(),
                      tiny_pair.make_models(), reward_fn=tiny_pair.contains_reward)
    kind = ContinuousSamplerEngine if sampler == "pool" else JaxSamplerEngine
    assert all(type(p.engine) is kind for p in trainer.policies.values())
    trainer.run(2)
    trainer.close()
    runs[sampler] = trainer
  names = list(runs["pool"].policies)
  for step in range(2):  # step 1 samples the weights step 0 trained, through set_weights
    for name in names:
      (pool, pool_logp), (static, static_logp) = (_responses(tmp_path / s, name, step)
                                                  for s in ("pool", "static"))
      assert pool and pool == static
      # The same products over a cache padded otherwise: equal up to float32 rounding.
      np.testing.assert_allclose(pool_logp, static_logp, atol=1e-5)
  # The pool's own measures of each step's call reach metrics.jsonl; the static sampler
  # measures none.
  logged = {s: read_jsonl(tmp_path / s / "metrics.jsonl") for s in ("pool", "static")}
  for step, row in enumerate(logged["pool"]):
    for name in names:
      responses, _ = _responses(tmp_path / "pool", name, step)
      assert row[f"{name}/engine/tokens"] == sum(len(r[2]) for r in responses)
      assert 0 < row[f"{name}/engine/slot_occupancy"] <= 1
      assert row[f"{name}/engine/live_kv_bytes_per_step"] > 0
  assert not any("/engine/" in k for row in logged["static"] for k in row)
  # GRAFT's gate reads the source's sampler log-probs, so the weights carry their
  # rounding, not more.
  for name in names:
    for x, y in zip(jax.tree.leaves(runs["pool"].policies[name].params),
                    jax.tree.leaves(runs["static"].policies[name].params)):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-6)


class _CountingEngine:
  """The pool engine itself; records the prompts of each ``generate``."""

  def __init__(self, engine):
    self.engine, self.calls = engine, []

  def generate(self, prompts, n, params):
    self.calls.append(len(prompts))
    return self.engine.generate(prompts, n, params)


def test_pool_validation_is_one_call_per_model_over_the_whole_suite(tmp_path):
  cfg = _cfg(tmp_path, "pool", **{"eval.every_steps": 1, "rollout.pool_prefill_group": 3,
                                   "rollout.pool_prefill_chunk": 32})
  suite = {"say": tiny_pair.problems(5, seed=9), "again": tiny_pair.problems(4, seed=10)}
  validator = Validator.from_config(cfg, tiny_pair.contains_reward)
  assert validator.batch_size == 0
  assert Validator.from_config(_cfg(tmp_path, "static"), None).batch_size == 64
  validator.suite, validator.k = suite, 3
  trainer = Trainer(cfg, tiny_pair.problems(), tiny_pair.make_models(),
                    reward_fn=tiny_pair.contains_reward)
  for p in trainer.policies.values():
    assert (p.engine.prefill_group, p.engine.prefill_chunk) == (3, 32)  # from the config
    p.engine = _CountingEngine(p.engine)
  report = validator.run(trainer.policies, step=0)
  trainer.close()
  for name, policy in trainer.policies.items():
    assert policy.engine.calls == [9]
    # By hand: a fresh pool over the suite's prompts, in order, under the eval seed.
    tok = policy.tokenizer
    problems = suite["say"] + suite["again"]
    prompts = [tok.encode(q.problem + cfg.data.prompt_suffix, add_special_tokens=False)
               for q in problems]
    fresh = ContinuousSamplerEngine(policy.model, eos_ids=tok.eos_token_id,
                                    pad_id=tok.pad_token_id, slots=3)
    batch = fresh.generate(prompts, 3, SamplingParams(
        max_new_tokens=cfg.max_response_len, temperature=cfg.eval.temperature,
        top_p=cfg.eval.top_p, seed=cfg.seed + 10_000))
    hits = np.array([problems[i].answer in tok.decode(batch.response_ids(b),
                                                      skip_special_tokens=True)
                     for b, i in enumerate(batch.prompt_index_B)])
    assert report[name]["say"] == pytest.approx(hits[:15].mean(), abs=1e-12)
    assert report[name]["again"] == pytest.approx(hits[15:].mean(), abs=1e-12)


@pytest.mark.slow  # two toy runs of two steps under 4 fake devices, in a fresh interpreter
def test_a_pool_run_on_a_mesh_samples_what_one_device_samples():
  from tests.fake_devices import run_script
  report = run_script("tests.train.sharded_pool_run_script", devices=4)
  (single_engines, single), (sharded_engines, sharded) = report["single"], report["sharded"]
  assert {e["type"] for e in sharded_engines.values()} == {"ContinuousSamplerEngine"}
  assert {e["row_shards"] for e in sharded_engines.values()} == {4}  # data 2 x fsdp 2
  assert {e["row_shards"] for e in single_engines.values()} == {1}
  for key in (k for k in single if k.endswith("/0")):  # the same weights: the same tokens
    assert single[key]["rows"] and sharded[key]["rows"] == single[key]["rows"], key
    np.testing.assert_allclose(sharded[key]["logp"], single[key]["logp"], atol=1e-5)
  # Step 1 samples from weights one sharded update produced: it runs, on the mesh.
  assert all(sharded[k]["rows"] for k in sharded if k.endswith("/1"))
