"""Every method on the toy pair at the same step budget, several seeds, both directions.

Each cell of ``RESULTS.md`` is held-out pass@1 (mean ± std over seeds) of the
updated model. Replay runs one way per direction, from the same seed's GRPO
(n=8) run's peer logs, as the paper's stored-log setting.
"""

from __future__ import annotations

import json
import logging
import pathlib
import time

import numpy as np

from graft_jax.experiments import toy_compare
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.train import config as config_lib
from graft_jax.train.metrics import read_jsonl
from graft_jax.train.trainer import Trainer

log = logging.getLogger(__name__)

# label -> toy.py presets; replay rows are added per direction.
METHODS = {
    "GRPO n=8": "grpo8", "GRPO n=16": "grpo16", "GRPO n=32": "grpo32", "GRAFT": "graft",
    "HACPO": "hacpo", "SGT": "sgt",
    "no gate": "graft,no_gate", "success-only": "graft,success_only",
    "pooled adv.": "graft,pooled", "peer-first": "graft,peer_first", "uniform order": "graft,uniform",
    "sequence ratio": "graft,sequence_ratio", "delta=0": "graft,delta0", "delta=0.9": "graft,delta0.9",
}


def _config(presets: str, workdir, seed: int, steps: int, pair, swap: bool = False, **fields):
  cd = config_lib.load_config(f"configs/toy.py:{presets}")
  with cd.unlocked():
    cd.workdir, cd.seed, cd.total_steps = str(workdir), seed, steps
    cd.checkpoint.resume = False
    cd.logging.progress_bar = False
    a, b = (pair.model_b, pair.model_a) if swap else (pair.model_a, pair.model_b)
    na, nb = (cd.model_b.name, cd.model_a.name) if swap else (cd.model_a.name, cd.model_b.name)
    cd.model_a.update(dict(path=str(a), name=na))
    cd.model_b.update(dict(path=str(b), name=nb))
    for key, value in fields.items():
      section, _, leaf = key.partition(".")
      cd[section][leaf] = value
  return config_lib.from_config_dict(cd)


def _train(cfg, problems, pair_cfg, eval_k: int, seed: int) -> dict:
  models = {}
  for m in (cfg.model_a, cfg.model_b):
    if cfg.method == "replay" and m is cfg.model_b:
      models[m.name] = (None, None)
    else:
      models[m.name] = (load_hf(m.path)[0], load_tokenizer(m.path))
  trainer = Trainer(cfg, problems, models)
  try:
    trainer.run()
  finally:
    trainer.close()
  trained = {n: (p.model, p.tokenizer) for n, p in trainer.policies.items()}
  evals = toy_compare.evaluate_models(trained, pair_cfg, k=eval_k, seed=seed)
  records = read_jsonl(pathlib.Path(cfg.workdir) / "metrics.jsonl")
  diag = {}
  for n in trained:
    for key in ("exchange/admitted", "exchange/peer_offered", "exchange/grafted_groups",
                "exchange/complementarity", "exchange/s_p50", "exchange/dropped_empty"):
      vals = [r.get(f"{n}/{key}") for r in records if r.get(f"{n}/{key}") is not None]
      if vals:
        diag[f"{n}/{key}"] = float(np.mean(vals))
  return {"pass1": {n: evals[n]["average"] for n in trained}, "diagnostics": diag}


def run_benchmark(pair, pair_cfg, out_dir, *, seeds, steps: int, eval_k: int,
                  methods=None) -> dict:
  """Runs every method for every seed; returns {label: {model: [pass@1 per seed]}} plus diagnostics."""
  out_dir = pathlib.Path(out_dir)
  names = [m["name"] for m in pair.record["models"]]
  methods = methods or METHODS
  cells: dict = {}
  diagnostics: dict = {}
  for seed in seeds:
    problems = toy_compare.train_problems(pair_cfg, 1536, seed)
    for label, presets in methods.items():
      t0 = time.perf_counter()
      res = _train(_config(presets, out_dir / f"s{seed}" / presets, seed, steps, pair),
                   problems, pair_cfg, eval_k, seed)
      for n, v in res["pass1"].items():
        cells.setdefault(label, {}).setdefault(n, []).append(v)
      diagnostics.setdefault(label, []).append(res["diagnostics"])
      log.info("seed %d %s: %s (%.0fs)", seed, label, res["pass1"], time.perf_counter() - t0)
    grpo_logs = out_dir / f"s{seed}" / methods.get("GRPO n=8", "grpo8") / "peer_logs"
    for swap in (False, True):
      cfg = _config("replay", out_dir / f"s{seed}" / f"replay_{int(swap)}", seed, steps, pair,
                    swap=swap, **{"replay.log_dir": str(grpo_logs)})
      res = _train(cfg, problems, pair_cfg, eval_k, seed)
      for n, v in res["pass1"].items():
        cells.setdefault("stored-log replay", {}).setdefault(n, []).append(v)
      diagnostics.setdefault("stored-log replay", []).append(res["diagnostics"])
    (out_dir / "cells.json").write_text(json.dumps({"cells": cells, "diagnostics": diagnostics},
                                                   indent=1))
  return {"names": names, "cells": cells, "diagnostics": diagnostics, "seeds": list(seeds),
          "steps": steps, "eval_k": eval_k}


def results_markdown(res: dict, command: str) -> str:
  """The RESULTS.md table: one row per method, one column per updated model, mean ± std."""
  names = res["names"]
  lines = ["# Toy reproduction benchmark", "",
           f"Command: `{command}`", "",
           f"Held-out pass@1 (%) of the updated model on the toy pair, k={res['eval_k']} samples "
           f"at T=0.6, top-p 0.95, after {res['steps']} steps; mean ± std over seeds "
           f"{res['seeds']}. Each model's peer is the other one.", "",
           "| method | " + " | ".join(f"{n} (peer {m})" for n, m in zip(names, names[::-1]))
           + " | mean |", "|---" * (len(names) + 2) + "|"]
  for label, per_model in res["cells"].items():
    vals = [np.asarray(per_model.get(n, [np.nan])) * 100 for n in names]
    row = " | ".join(f"{v.mean():.2f} ± {v.std(ddof=1) if len(v) > 1 else 0:.2f}" for v in vals)
    lines.append(f"| {label} | {row} | {np.mean([v.mean() for v in vals]):.2f} |")
  return "\n".join(lines) + "\n"
