"""GRPO (n=8) vs GRAFT on the toy pair at the same step budget, both directions, then held-out pass@1.

``run_comparison`` trains each method's run with ``graft_jax.train.Trainer``
from the same initial checkpoints, evaluates every policy on held-out
synthetic problems per family group, and returns a results dict that
``graft_jax.experiments.toy_report`` prints and plots.
"""

from __future__ import annotations

import logging
import pathlib
import time

import numpy as np

from graft_jax import data
from graft_jax import eval as graft_eval
from graft_jax.data.prompts import PromptTemplate
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.toy import pair as toy_pair
from graft_jax.train.metrics import read_jsonl
from graft_jax.train.trainer import Trainer

log = logging.getLogger(__name__)


def load_pair(pair) -> dict:
  """{name: (decoder, tokenizer)} from the pair's HF folders, as for real models."""
  out = {}
  for spec, folder in ((pair.record["models"][0], pair.model_a), (pair.record["models"][1], pair.model_b)):
    model, _ = load_hf(folder)
    out[spec["name"]] = (model, load_tokenizer(folder))
  return out


def train_problems(pair_cfg, num: int, seed: int):
  """Training prompts over every evaluated family, disjoint from the held-out set."""
  held_out = {p.problem for p in toy_pair.eval_problems(pair_cfg)}
  per_family = max(1, num // len(pair_cfg.eval_families))
  return data.make_synthetic(list(pair_cfg.eval_families), per_family, seed=seed + 500,
                             difficulty=pair_cfg.difficulty, exclude=held_out)


def evaluate_models(models: dict, pair_cfg, *, k: int, seed: int) -> dict:
  """pass@1 per family group (T=0.6, top-p 0.95) and per-problem correct counts."""
  problems = toy_pair.eval_problems(pair_cfg)
  suite = {group: [p for p in problems if p.family in fams] for group, fams in pair_cfg.groups}
  sampling = SamplingParams(max_new_tokens=pair_cfg.max_new_tokens, temperature=0.6, top_p=0.95,
                            seed=seed)
  out = {}
  for name, (model, tok) in models.items():
    engine = JaxSamplerEngine(model, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id)
    report = graft_eval.evaluate(engine, tok, suite, k=k, sampling=sampling,
                                 template=PromptTemplate.named("toy"), batch_size=64)
    out[name] = {
        "pass1": {r.name: r.pass_at[1] for r in report.results},
        "average": report.average[1],
        "num_correct": {pid: c for r in report.results for pid, c in r.num_correct.items()},
    }
  return out


def complementarity(evals: dict, names) -> dict:
  """Share of each model's all-fail held-out problems that its peer solves at least once."""
  a, b = names
  out = {}
  for recv, src in ((a, b), (b, a)):
    fails = [p for p, c in evals[recv]["num_correct"].items() if c == 0]
    solved = sum(1 for p in fails if evals[src]["num_correct"].get(p, 0) > 0)
    out[recv] = {"all_fail": len(fails), "peer_solves": solved,
                 "share": solved / len(fails) if fails else float("nan")}
  return out


def train(cfg, problems, models: dict) -> dict:
  """Runs a ``Trainer`` to the config's step budget; returns the trained ``{name: (decoder, tokenizer)}``."""
  trainer = Trainer(cfg, problems, models)
  try:
    trainer.run()
  finally:
    trainer.close()
  return {n: (p.model, p.tokenizer) for n, p in trainer.policies.items()}


def smoke_overrides(pair_cfg):
  """Shrinks a toy config's step for the tiny pair: 8 prompts, short responses (CI smoke runs)."""
  def apply(cd):
    cd.prompts_per_step = 8
    cd.max_response_len = pair_cfg.max_new_tokens
    cd.hacpo.minibatch_prompts = 4
  return apply


def run_comparison(cfgs: dict, pair, pair_cfg, *, eval_k: int = 4, seed: int = 0,
                   num_train_problems: int = 1536) -> dict:
  """Trains every ``cfgs[method]`` from the pair's initial weights and evaluates the results.

  Args:
    cfgs: ``{method label: TrainConfig}``, each with its own workdir.
    pair: a built ``graft_jax.toy.ToyPair``.
    pair_cfg: the ``ToyPairConfig`` it was built with (held-out set, groups).
  """
  problems = train_problems(pair_cfg, num_train_problems, seed)
  start = time.perf_counter()
  initial = load_pair(pair)
  names = list(initial)
  results = {"names": names, "eval_k": eval_k, "groups": [g for g, _ in pair_cfg.groups],
             "initial": evaluate_models(initial, pair_cfg, k=eval_k, seed=seed), "runs": {}}
  results["complementarity_start"] = complementarity(results["initial"], names)
  for label, cfg in cfgs.items():
    t0 = time.perf_counter()
    trained = train(cfg, problems, load_pair(pair))
    evals = evaluate_models(trained, pair_cfg, k=eval_k, seed=seed)
    results["runs"][label] = {
        "evals": evals, "seconds": time.perf_counter() - t0,
        "complementarity_end": complementarity(evals, names),
        "curve": [{"step": r["step"], **{n: r.get(f"{n}/reward_mean") for n in names},
                   **{f"{n}/grafted": r.get(f"{n}/exchange/grafted_groups") for n in names}}
                  for r in read_jsonl(pathlib.Path(cfg.workdir) / "metrics.jsonl")],
        "steps": cfg.total_steps}
  results["seconds"] = time.perf_counter() - start
  return results

