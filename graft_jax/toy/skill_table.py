"""The toy pair's skill table: pass rate of each model on each family group, and
how often it chooses the correct procedure (its strategy word).

Sampling goes through `JaxSamplerEngine` and scoring through
`graft_jax.rewards.score`, i.e. the code the trainer uses, on held-out problems.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from graft_jax.data import synthetic_columns as columns
from graft_jax.toy.group_pools import strategy_prefix
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.rewards import score
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.toy import spec as spec_lib
from graft_jax.toy.problems import eval_problems, prompt_text


def sample_pass_rates(folder: str | Path, problems, *, n: int, max_new_tokens: int,
                      temperature: float = 1.0, seed: int = 0,
                      timeout_s: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
  """Per-problem mean reward and share of samples that open with the correct
  strategy word (`group_pools.strategy_prefix`), over `n` samples of the model in `folder`."""
  model, _ = load_hf(folder)
  tok = load_tokenizer(folder)
  engine = JaxSamplerEngine(model, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id)
  prompts = [tok.encode(prompt_text(p.problem), add_special_tokens=False) for p in problems]
  batch = engine.generate(prompts, n, SamplingParams(
      max_new_tokens=max_new_tokens, temperature=temperature, seed=seed))
  texts = [tok.decode(batch.response_ids(b), skip_special_tokens=True)
           for b in range(len(batch.finished_B))]
  golds = [problems[i].answer for i in batch.prompt_index_B]
  rewards_B, _ = score(texts, golds, timeout_s=timeout_s)
  correct_B = np.array([t.strip().startswith(strategy_prefix(problems[i].family, columns.CORRECT))
      for t, i in zip(texts, batch.prompt_index_B)])
  return (rewards_B.reshape(len(problems), n).mean(axis=1),
          correct_B.reshape(len(problems), n).mean(axis=1))


def pass_rate_table(folders: Sequence[str | Path], cfg: spec_lib.ToyPairConfig) -> dict:
  """{model name: {group: mean pass rate, "families": {family: pass rate},
  "strategy": {family: share choosing the correct procedure}}} at temperature 1."""
  problems = eval_problems(cfg)
  table = {}
  for spec, folder in zip(cfg.models, folders):
    rates, strategy = sample_pass_rates(folder, problems, n=cfg.eval_samples,
                                        max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)
    by_family = {f: float(np.mean([r for r, p in zip(rates, problems) if p.family == f]))
                 for f in cfg.eval_families}
    row = {g: float(np.mean([by_family[f] for f in fams])) for g, fams in cfg.groups}
    row["families"] = by_family
    row["strategy"] = {f: float(np.mean([s for s, p in zip(strategy, problems) if p.family == f]))
                       for f in cfg.eval_families}
    table[spec.name] = row
  return table


def format_table(table: dict, groups: Sequence[str]) -> str:
  """The table as aligned text: one row per model, one column per group, then families."""
  families = list(next(iter(table.values()))["families"])
  head = ["model", *groups, *(f"{f} correct strategy" for f in families)]
  rows = [[name, *(f"{row[g]:.3f}" for g in groups),
           *(f"{row.get('strategy', {}).get(f, float('nan')):.4f}" for f in families)]
          for name, row in table.items()]
  widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
  line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
  return "\n".join([line(head), *map(line, rows)])
