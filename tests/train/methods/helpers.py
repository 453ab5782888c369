"""Hand-made rollouts of two tiny policies with different tokenizers, for the methods' tests.

Rewards, texts and the generator's stored log-probs are chosen here, so every
expected row, advantage and gate weight follows from them by hand or by a
float64 NumPy forward pass, never from the code under test.
"""

from __future__ import annotations

import functools

import numpy as np

from configs import base, toy
from graft_jax.rollout import RolloutBatch
from graft_jax.train import methods
from graft_jax.config import run_config as config_lib
from graft_jax.train.collect import Rollout
from graft_jax.train.policy import make_policy
from tests.core import reference
from tests.train import tiny_pair

N, G = 4, 4
# Rewards of A and B per prompt: A fails q0, q1, q3; B mixes q0 and q2, fails q1, passes q3.
R_A = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
R_B = [[0, 1, 0, 1], [0, 0, 0, 0], [0, 1, 1, 0], [1, 1, 1, 1]]
TEXTS = ["ab", "a b", "c", "bd", "d", "cc", "a", "b1", "2", "ba", "dc", "1a", "b", "3", "ad", "c2"]


NAMES3 = ("toy_a", "toy_b", "toy_c")


def config(method: str, *, three: bool = False, **fields):
  """The toy config at this file's sizes; ``three``: the run's models are ``NAMES3``."""
  cd = toy.get_config(method)
  with cd.unlocked():
    if three:
      base.set_models(cd, [("", name) for name in NAMES3])
    cd.prompts_per_step, cd.n, cd.num_minibatches = G, N, 2
    cd.max_prompt_len, cd.max_response_len = 32, 16
    cd.hacpo.minibatch_prompts = 2
    for k, v in fields.items():
      node, *path = cd, *k.split(".")
      for p in path[:-1]:
        node = node[p]
      node[path[-1]] = v
  return config_lib.from_config_dict(cd)


@functools.lru_cache(maxsize=1)
def _models():
  return tiny_pair.make_models()


def policies(cfg) -> dict:
  """{'toy_a': policy a, 'toy_b': policy b}, fresh parameters each call, reference kept."""
  models = _models()
  return {name: make_policy(name, *models[key], cfg.optimizer, cfg.data.prompt_suffix,
                            keep_reference=True)
          for name, key in (("toy_a", "a"), ("toy_b", "b"))}


@functools.lru_cache(maxsize=1)
def _third():
  return tiny_pair.make_third_model()


def policies3(cfg) -> dict:
  """``policies`` plus 'toy_c' (a llama-like decoder with a tokenizer of its own)."""
  third = make_policy("toy_c", *_third(), cfg.optimizer, cfg.data.prompt_suffix)
  return {**policies(cfg), "toy_c": third}


def problems():
  return tiny_pair.problems(G, seed=3)


def rollout(policy, rewards_GxN, *, gen_mean_B=None, finished_B=None, texts=TEXTS) -> Rollout:
  """A rollout of ``policy`` with the given rewards; every stored generation log-prob of
  row b is ``gen_mean_B[b]`` (so its mean is exactly that)."""
  rewards_GxN = np.asarray(rewards_GxN, np.float32)
  g, n = rewards_GxN.shape
  finished_B = np.ones(g * n, bool) if finished_B is None else np.asarray(finished_B, bool)
  gen_mean_B = np.full(g * n, -2.0, np.float32) if gen_mean_B is None else gen_mean_B
  ids = [policy.encode_response(t, bool(f)) for t, f in zip(texts, finished_B)]
  width = max(len(x) for x in ids)
  tok = np.full((g * n, width), policy.pad_id, np.int32)
  mask = np.zeros((g * n, width), bool)
  logp = np.zeros((g * n, width), np.float32)
  for b, x in enumerate(ids):
    tok[b, :len(x)], mask[b, :len(x)], logp[b, :len(x)] = x, True, gen_mean_B[b]
  batch = RolloutBatch(tok, mask, logp, finished_B, ~finished_B,
                       np.repeat(np.arange(g, dtype=np.int32), n), n)
  prompt_ids = [policy.prompt_ids(p.problem) for p in problems()]
  adv_GxN = reference.grpo_adv(rewards_GxN).astype(np.float32)
  old = [np.full(len(x), -1.5 - 0.1 * b, np.float32) for b, x in enumerate(ids)]
  return Rollout(policy.name, batch, prompt_ids, ids, list(texts), rewards_GxN, adv_GxN, old,
                 np.asarray(gen_mean_B, np.float32))


def logp_numpy(policy, prompt, response) -> np.ndarray:
  """log pi(response_t | prompt, response_<t) by one plain forward pass, in float64."""
  ids = np.array([list(prompt) + list(response)], np.int32)
  logits = np.asarray(policy.model(ids), np.float64)[0]
  top = logits.max(-1, keepdims=True)
  logz = (np.log(np.exp(logits - top).sum(-1, keepdims=True)) + top)[:, 0]
  return np.array([logits[len(prompt) - 1 + t, tok] - logz[len(prompt) - 1 + t]
                   for t, tok in enumerate(response)])


def build(method_name: str, *, r_a=R_A, r_b=R_B, gen_mean_b=None, key=None, **fields):
  """(cfg, policies, rollouts, method, method.build_rows(...)) for one step of A and B."""
  cfg = config(method_name, **fields)
  pols = policies(cfg)
  rolls = {"toy_a": rollout(pols["toy_a"], r_a),
           "toy_b": rollout(pols["toy_b"], r_b, gen_mean_B=gen_mean_b)}
  method = methods.make(cfg)
  method.start(list(rolls), None)
  return cfg, pols, rolls, method, method.build_rows(
      pols, rolls, method.peers(rolls, problems(), 0), key)
