"""GRPO (n=8) vs GRAFT on the toy pair at the same step budget, both directions, then held-out pass@1.

``run_comparison`` trains each method's run with ``graft_jax.train.Trainer``
from the same initial checkpoints on the toy's RL pool (a balanced stream of
both families), validates every few steps on a slice of the held-out set,
evaluates every policy on the whole held-out set at T=1 (the headline) and at
T=0.6 / top-p 0.95 (the paper's setting), and returns a results dict that
``graft_jax.experiments.toy_report`` prints and plots. ``results["summary"]``
is ``{model: {method: held-out pass@1 (%) at T=1}}``, with ``initial`` for the
pair as built.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import shutil
import time

import numpy as np

from graft_jax import cli, compile_cache
from graft_jax import eval as graft_eval
from graft_jax.data.prompts import PromptTemplate
from graft_jax.experiments import job_signals
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.toy import pair as toy_pair
from graft_jax.config import run_config as config_lib
from graft_jax.outputs import cost_totals, progress
from graft_jax.outputs.metrics_writer import read_jsonl
from graft_jax.train import methods
from graft_jax.train.trainer import Trainer
from graft_jax.train.validation import Validator

log = logging.getLogger(__name__)
TOY_CONFIG = pathlib.Path(__file__).resolve().parents[2] / "configs" / "toy.py"


def load_pair(pair) -> dict:
  """{name: (decoder, tokenizer)} from the pair's (or group's) HF folders, as for real models."""
  out = {}
  for spec, folder in zip(pair.record["models"], pair.model_dirs):
    model, _ = load_hf(folder)
    out[spec["name"]] = (model, load_tokenizer(folder))
  return out


# name -> (temperature, top_p) of the held-out evaluations; "t1" is the headline.
EVAL_SETTINGS = {"t1": (1.0, 1.0), "t06": (0.6, 0.95)}
VALIDATION_PER_FAMILY = 64  # held-out problems per family validated during training


def train_problems(pair_cfg, num: int, seed: int):
  """The first ``num`` RL prompts in the seed's balanced order (never in a warm start or eval)."""
  return toy_pair.rl_problems(pair_cfg, seed)[:num]


def eval_suite(pair_cfg, per_family: int | None = None) -> dict:
  """{group: held-out problems}, optionally the first ``per_family`` of each family."""
  problems = toy_pair.eval_problems(pair_cfg)
  suite = {}
  for group, fams in pair_cfg.groups:
    probs = [p for p in problems if p.family in fams]
    suite[group] = probs[:per_family * len(fams)] if per_family else probs
  return suite


def evaluate_models(models: dict, pair_cfg, *, k: int, seed: int) -> dict:
  """Held-out pass@1 per family group at each of ``EVAL_SETTINGS``.

  ``out[name]`` has ``pass1`` (per group), ``average`` and ``num_correct`` (per
  problem) at T=1, and the same under ``out[name][setting]`` for every setting.
  """
  suite = eval_suite(pair_cfg)
  out = {}
  for name, (model, tok) in models.items():
    engine = JaxSamplerEngine(model, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id)
    out[name] = {}
    for setting, (temperature, top_p) in EVAL_SETTINGS.items():
      sampling = SamplingParams(max_new_tokens=pair_cfg.max_new_tokens, temperature=temperature,
                                top_p=top_p, seed=seed)
      report = graft_eval.evaluate(engine, tok, suite, k=k, sampling=sampling,
                                   template=PromptTemplate.named("toy"), batch_size=128,
                                   log_each=False)  # the job prints the tables
      out[name][setting] = {
          "pass1": {r.name: r.pass_at[1] for r in report.results},
          "average": report.average[1],
          "num_correct": {pid: c for r in report.results for pid, c in r.num_correct.items()},
      }
    out[name].update(out[name]["t1"])
  return out


def validator(cfg, pair_cfg) -> Validator:
  """Held-out pass@1 at T=1 (one sample per problem) every ``cfg.eval.every_steps`` steps."""
  return Validator(eval_suite(pair_cfg, VALIDATION_PER_FAMILY), every_steps=cfg.eval.every_steps,
                   k=1, temperature=1.0, top_p=1.0, seed=cfg.seed,
                   max_new_tokens=cfg.max_response_len, prompt_suffix=cfg.data.prompt_suffix,
                   score_fn=None, batch_size=128)


def complementarity(evals: dict, names) -> dict:
  """Share of each model's all-fail held-out problems that a peer (any other of ``names``)
  solves at least once."""
  out = {}
  for recv in names:
    fails = [p for p, c in evals[recv]["num_correct"].items() if c == 0]
    solved = sum(1 for p in fails if any(evals[src]["num_correct"].get(p, 0) > 0
                                         for src in names if src != recv))
    out[recv] = {"all_fail": len(fails), "peer_solves": solved,
                 "share": solved / len(fails) if fails else float("nan")}
  return out


def train(cfg, problems, models: dict, validate=None) -> dict:
  """Runs a ``Trainer`` to the config's step budget; returns the trained ``{name: (decoder, tokenizer)}``.

  ``validate``: an optional ``Validator`` for held-out pass@1 during training. A stop
  signal (the job's ``job_signals.job_stop``, when under one) saves the step in flight and
  raises ``preemption.Stopped``.
  """
  methods.write_run_config(cfg)
  trainer = Trainer(cfg, problems, models, validator=validate)
  try:
    trainer.run(stop=job_signals.active())
  finally:
    trainer.close()
  return {n: (p.model, p.tokenizer) for n, p in trainer.policies.items()}


# Per-step exchange figures kept for the report: (results key, metrics.jsonl key).
CURVE_KEYS = (("reward", "reward_mean"), ("grafted", "exchange/grafted_groups"),
              ("offered", "exchange/peer_offered"), ("admitted", "exchange/admitted"),
              ("s_p50", "exchange/s_p50"), ("eval", "eval/average"))


def curve(records, names) -> list[dict]:
  """One row per step: ``{"step", "<model>/<key>" ...}`` for each of ``CURVE_KEYS``; past
  two models also ``"<receiver>/from/<source>/<key>"`` for each directed pair."""
  pairs = [(r, s) for r in names for s in names if r != s] if len(names) > 2 else []
  return [{"step": r["step"], **{f"{n}/{k}": r.get(f"{n}/{m}") for n in names for k, m in CURVE_KEYS},
           **{f"{a}/from/{b}/{k}": r.get(f"{a}/{m.replace('exchange/', f'exchange/from/{b}/')}")
              for a, b in pairs for k, m in CURVE_KEYS if m.startswith("exchange/")}}
          for r in records]


def admission(rows, names) -> dict:
  """{model: admitted / offered peer responses over the run} (None without an exchange)."""
  out = {}
  for n in names:
    offered = sum(r.get(f"{n}/offered") or 0 for r in rows)
    admitted = sum(r.get(f"{n}/admitted") or 0 for r in rows)
    out[n] = admitted / offered if offered else None
  return out


def smoke_overrides(pair_cfg):
  """Shrinks a toy config's step for the tiny pair: 8 prompts, short responses (CI smoke runs)."""
  def apply(cd):
    cd.prompts_per_step = 8
    cd.max_response_len = pair_cfg.max_new_tokens
    cd.hacpo.minibatch_prompts = 4
  return apply


def method_configs(pair_cfg, overrides=(), *, workdir, seed: int, steps: int | None = None,
                   smoke: bool = False, jobs: int = 1, methods=("grpo", "graft"),
                   config_file=TOY_CONFIG, models: dict | None = None) -> dict:
  """``{label: TrainConfig}``: ``<config_file>:<preset>`` in ``<workdir>/<label>``.

  ``methods`` lists presets (each its own label) or maps labels to presets;
  ``models`` optionally maps a label to its ``models`` ((path, name) each).
  ``overrides`` are ``'field=value'`` items applied to every method last, as
  ``--config.field=value`` flags (an error names the flag); ``smoke`` runs 2
  steps of the tiny pair (``smoke_overrides``).
  """
  cfgs = {}
  presets = methods if isinstance(methods, dict) else {m: m for m in methods}
  for method, preset in presets.items():
    cd = config_lib.load_config(f"{config_file}:{preset}")
    with cd.unlocked():
      if models and method in models:
        cd.models = tuple(dict(path=str(path), name=name) for path, name in models[method])
      cd.workdir = str(pathlib.Path(workdir) / method)
      cd.seed = seed
      if steps:
        cd.total_steps = steps
      if smoke:
        cd.total_steps = 2
        smoke_overrides(pair_cfg)(cd)
      # Each run shows its steps: as the bar, or as lines named after it (`run_method`).
      cd.logging.progress_bar = True
      config_lib.apply_overrides(cd, overrides, flag="--config.")
    cfgs[method] = config_lib.from_config_dict(cd)
  return cfgs


def run_method(cfg, pair, pair_cfg, *, eval_k: int, seed: int, num_train_problems: int) -> dict:
  """One method's run: trains from the pair's initial weights, then evaluates (picklable result).

  Its progress and log lines are whole lines named after its workdir (``[graft] step 3/80:
  ...``): the job's runs share one terminal or log."""
  with progress.shared_output(pathlib.Path(cfg.workdir).name):
    return _run_method(cfg, pair, pair_cfg, eval_k=eval_k, seed=seed,
                       num_train_problems=num_train_problems)


def _run_method(cfg, pair, pair_cfg, *, eval_k: int, seed: int, num_train_problems: int) -> dict:
  t0 = time.perf_counter()
  problems = train_problems(pair_cfg, num_train_problems, seed)
  names = [p.name for p in config_lib.policy_configs(cfg)]
  loaded = load_pair(pair)
  models = {n: loaded[n] for n in names}  # the run's models, in the config's order
  trained = train(cfg, problems, models, validator(cfg, pair_cfg) if cfg.eval.every_steps else None)
  evals = evaluate_models(trained, pair_cfg, k=eval_k, seed=seed)
  records = read_jsonl(pathlib.Path(cfg.workdir) / "metrics.jsonl")
  rows = curve(records, names)
  # The cost from step 1 on; step 0's (compilation) apart, as "cost_first_step".
  return {"evals": evals, "seconds": time.perf_counter() - t0,
          **cost_totals.split_first_step(records), "complementarity_end": complementarity(evals, names),
          "curve": rows, "admission": admission(rows, names), "steps": cfg.total_steps}


def evaluate_initial(pair, pair_cfg, *, eval_k: int, seed: int) -> dict:
  with progress.shared_output("initial"):
    return evaluate_models(load_pair(pair), pair_cfg, k=eval_k, seed=seed)


STARTED_FILE = "started.json"  # in a run's workdir: the key (pair, step budget) it started for


def resume_or_start(cfg, key: str):
  """``cfg`` set to resume its workdir's run when that run was started for the same ``key``
  (the pair and step budget) and ``checkpoint.resume`` is on; otherwise to start over,
  without the other run's checkpoints, which would stand in for this run's steps, its
  metrics rows and its peer logs.

  The config is checked against the run it resumes (``ConfigError`` naming the field)
  before any model loads.
  """
  workdir, ckpt = pathlib.Path(cfg.workdir), pathlib.Path(cfg.checkpoint_dir)
  marker = workdir / STARTED_FILE
  same = (cfg.checkpoint.resume and marker.is_file()
          and json.loads(marker.read_text()) == {"key": key})
  cfg = dataclasses.replace(cfg, checkpoint=dataclasses.replace(cfg.checkpoint, resume=same))
  # The run it held goes whole: its rows and logs would mix with this run's (and the
  # trainer refuses a fresh run over them, `outputs.workdir_runs`).
  for old in (ckpt, pathlib.Path(cfg.peer_log_dir), workdir / "metrics.jsonl"):
    if not same and old.exists() and workdir.resolve() in old.resolve().parents:
      log.info("%s: starting over; removing %s of the run it held", workdir, old.name)
      if old.is_dir():
        shutil.rmtree(old)
      else:
        old.unlink()
  workdir.mkdir(parents=True, exist_ok=True)
  methods.write_run_config(cfg)
  marker.write_text(json.dumps({"key": key}) + "\n")
  return cfg


def _start_worker(cache_dir: str) -> None:
  """A spawned worker's set-up: logs as the launcher's, and the compilation cache."""
  cli.setup_logging()
  compile_cache.enable(cache_dir)


def run_comparison(cfgs: dict, pair, pair_cfg, *, eval_k: int = 2, seed: int = 0,
                   num_train_problems: int = 2048, jobs: int = 1) -> dict:
  """Trains every ``cfgs[method]`` from the pair's initial weights and evaluates the results.

  Args:
    cfgs: ``{method label: TrainConfig}``, each with its own workdir.
    pair: a built ``graft_jax.toy.ToyPair``.
    pair_cfg: the ``ToyPairConfig`` it was built with (pools, groups).
    jobs: runs (and the initial evaluation) at a time; above 1 each runs in a
      spawned process. The runs are independent, so results do not depend on it.

  A run resumes where an earlier call with the same pair and step budget left it
  (``resume_or_start``). A stop signal (SIGTERM, SIGINT, SIGUSR1) makes every run
  save its step in flight and raises ``job_signals.JobStopped`` (exit 75 under the
  launchers' console): the same call resumes.
  """
  start = time.perf_counter()
  # The runs share most programs (the pair's samplers and scorers, each method's
  # update): one process compiles a program, the others load it from the cache.
  cache_dir = next(iter(cfgs.values())).perf.compile_cache_dir if cfgs else ""
  compile_cache.enable(cache_dir)
  cfgs = {label: resume_or_start(cfg, f"{pair.key}-{cfg.total_steps}")
          for label, cfg in cfgs.items()}
  kw = dict(eval_k=eval_k, seed=seed)
  tasks = {label: (run_method, (cfg, pair, pair_cfg), dict(kw, num_train_problems=num_train_problems))
           for label, cfg in cfgs.items()}
  tasks["initial"] = (evaluate_initial, (pair, pair_cfg), kw)
  # Each worker logs like the launcher: our lines above the bar, third-party INFO quiet.
  done = job_signals.run_tasks(tasks, jobs, initializer=_start_worker, initargs=(cache_dir,))
  names = [m["name"] for m in pair.record["models"]]
  results = {"names": names, "eval_k": eval_k, "groups": [g for g, _ in pair_cfg.groups],
             "eval_problems": len(toy_pair.eval_problems(pair_cfg)), "initial": done["initial"],
             "runs": {label: done[label] for label in cfgs}}
  results["complementarity_start"] = complementarity(results["initial"], names)
  results["summary"] = summary(results, "t1")
  results["summary_t06"] = summary(results, "t06")
  results["seconds"] = time.perf_counter() - start
  return results


def summary(results: dict, setting: str) -> dict:
  """{model: {"initial" | method: held-out pass@1 in percent at ``setting``}}."""
  out = {}
  for n in results["names"]:
    out[n] = {"initial": 100 * results["initial"][n][setting]["average"]}
    for label, run in results["runs"].items():
      if n in run["evals"]:  # a run of some of a group's models
        out[n][label] = 100 * run["evals"][n][setting]["average"]
  return out
