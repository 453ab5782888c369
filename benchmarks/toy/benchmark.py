"""Every method on the toy pair at the same step budget, several seeds, both directions.

The benchmark is a list of independent *cells* (seed, method). Each cell trains
from the pair's initial weights, evaluates on the held-out problems, and writes
``cell.json`` in its own workdir, so cells can run in parallel processes
(``run_cells`` with ``jobs > 1``) and a rerun skips the finished ones. Replay
cells train one model per direction from the same seed's GRPO (n=8) peer logs
(the paper's stored-log setting), so they wait for that cell.

Each cell of ``RESULTS.md`` is held-out pass@1 (mean ± std over seeds) of the
updated model; the diagnostics table carries the exchange figures the issue
asks about (admission, complementarity, gate scores, re-tokenization drops).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import pathlib
import subprocess
import sys
import time

import numpy as np

from benchmarks.toy import code_version, costs as toy_costs, sign_table as toy_sign_table
from graft_jax.experiments import job_signals, toy_compare
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.train import methods
from graft_jax.config import run_config as config_lib
from graft_jax.config.checks import resume_locked
from graft_jax.config.load import flatten
from graft_jax.outputs.metrics_writer import read_jsonl

log = logging.getLogger(__name__)

# label -> toy.py presets. Replay cells (one per direction) are added per seed.
METHODS = {
    "GRPO n=8": "grpo8", "GRPO n=16": "grpo16", "GRPO n=32": "grpo32", "GRAFT": "graft",
    "HACPO": "hacpo", "SGT": "sgt",
    "HACPO on GRAFT's prompts": "hacpo_graft_prompts", "SGT on GRAFT's prompts": "sgt_graft_prompts",
    "no gate": "graft,no_gate", "success-only": "graft,success_only",
    "pooled adv.": "graft,pooled", "peer-first": "graft,peer_first", "uniform order": "graft,uniform",
    "sequence ratio": "graft,sequence_ratio", "delta=0": "graft,delta0", "delta=0.9": "graft,delta0.9",
}
# Validation during training every this many steps: the figure's points (each validation
# samples 2 x toy_compare.VALIDATION_PER_FAMILY problems; every 5 steps, as the main job
# does, costs the benchmark about a third more time).
VALIDATE_EVERY = 10
REPLAY = "stored-log replay"
INITIAL = "initial (no training)"
# Mean over steps of these per-model metrics go to the diagnostics table.
DIAGNOSTICS = ("exchange/candidates", "exchange/grafted_groups", "exchange/peer_offered",
               "exchange/admitted", "exchange/complementarity", "exchange/s_p50",
               "exchange/dropped_empty", "exchange/dropped_nonfinite", "update/clip_frac_graft",
               "update/clip_frac_own", "all_fail", "reward_mean")


@dataclasses.dataclass(frozen=True)
class Cell:
  """One training run of the benchmark."""

  seed: int
  label: str
  presets: str
  swap: bool = False        # replay: the second model is the trained one
  needs: str | None = None  # slug of the cell whose peer logs it replays

  @property
  def slug(self) -> str:
    if self.label == REPLAY:
      return f"s{self.seed}/replay_{int(self.swap)}"
    if self.label == INITIAL:
      return f"s{self.seed}/initial"
    return f"s{self.seed}/{self.presets.replace(',', '_')}"


def plan_cells(seeds, methods=None) -> list[Cell]:
  """Every (seed, method) cell, plus two replay cells per seed when GRPO n=8 is in the plan."""
  methods = METHODS if methods is None else methods
  cells = []
  for seed in seeds:
    cells.append(Cell(seed, INITIAL, "grpo8"))
    for label, presets in methods.items():
      cells.append(Cell(seed, label, presets))
    if "GRPO n=8" in methods:
      grpo = Cell(seed, "GRPO n=8", methods["GRPO n=8"]).slug
      cells += [Cell(seed, REPLAY, "replay", swap=s, needs=grpo) for s in (False, True)]
  return cells


def cell_config(cell: Cell, out_dir, steps: int, pair, overrides=None,
                config_file: str = "configs/toy.py"):
  """The cell's ``TrainConfig``: the regime's config file (toy.py by default) with the
  cell's presets, its seed and the step budget."""
  cd = config_lib.load_config(f"{config_file}:{cell.presets}")
  with cd.unlocked():
    cd.workdir, cd.seed, cd.total_steps = str(pathlib.Path(out_dir) / cell.slug), cell.seed, steps
    cd.logging.progress_bar = False
    cd.eval.every_steps = VALIDATE_EVERY  # does not change training (graft_jax.train.validation)
    a, b = (pair.model_b, pair.model_a) if cell.swap else (pair.model_a, pair.model_b)
    na, nb = (cd.model_b.name, cd.model_a.name) if cell.swap else (cd.model_a.name, cd.model_b.name)
    cd.model_a.update(dict(path=str(a), name=na))
    cd.model_b.update(dict(path=str(b), name=nb))
    if cell.needs:
      cd.replay.log_dir = str(pathlib.Path(out_dir) / cell.needs / "peer_logs")
    if overrides is not None:
      overrides(cd)
  return config_lib.from_config_dict(cd)


# Fields added after cells were recorded whose default is the math those cells ran:
# left out of `run_key`'s digest at their default, so adding one reruns nothing.
# reward.success_threshold = 0 is the 0 / 1 rewards every recorded cell was trained on.
ADDED_FIELDS = ("sgt.prompts", "hacpo.prompts", "luffy.gamma", "reward.success_threshold")


def run_key(pair, config_file: str = "configs/toy.py") -> str:
  """The pair's key and a digest of the config file's fields that change the math
  (``config_checks.RESUME_LOCKED`` and every method's ``resume_locked``, model paths aside, `ADDED_FIELDS` at their
  defaults): a finished cell is reused only under the same key, so a change of the
  toy's learning rate or batch reruns it."""
  cd = config_lib.load_config(config_file)
  default = flatten(config_lib.to_dict(config_lib.TrainConfig()))
  sections = {f for m in methods.REGISTRY.values() for f in m.resume_locked}  # every method's
  fields = {k: v for k, v in flatten(config_lib.to_dict(config_lib.from_config_dict(cd))).items()
            if resume_locked(k, sections) and not k.endswith(".path")
            and not (k in ADDED_FIELDS and v == default[k])}
  digest = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()
  return f"{pair.key}-{digest[:12]}"


def cell_path(cell: Cell, out_dir) -> pathlib.Path:
  return pathlib.Path(out_dir) / cell.slug / "cell.json"


def run_cell(cell: Cell, pair, pair_cfg, out_dir, *, steps: int, eval_k: int,
             overrides=None, num_problems: int = 2048,
             config_file: str = "configs/toy.py") -> dict:
  """Trains and evaluates one cell in this process; writes and returns its ``cell.json``.

  ``overrides(config_dict)`` may edit the cell's ConfigDict before validation
  (the smoke run shrinks the step).
  """
  t0 = time.perf_counter()
  cfg = cell_config(cell, out_dir, steps, pair, overrides, config_file)
  models = {}
  for m in (cfg.model_a, cfg.model_b):
    replayed = not methods.trains(cfg, m)
    models[m.name] = (None, None) if replayed else (load_hf(m.path)[0], load_tokenizer(m.path))
  if cell.label == INITIAL:  # the pair as built: the baseline every method starts from
    trained, records = models, []
  else:
    # A cell a stop signal ended resumes where it saved (same pair, config and steps).
    cfg = toy_compare.resume_or_start(cfg, f"{run_key(pair, config_file)}-{steps}")
    validate = toy_compare.validator(cfg, pair_cfg) if cfg.eval.every_steps else None
    trained = toy_compare.train(cfg, toy_compare.train_problems(pair_cfg, num_problems, cell.seed),
                                models, validate)
    records = read_jsonl(pathlib.Path(cfg.workdir) / "metrics.jsonl")
  evals = toy_compare.evaluate_models(trained, pair_cfg, k=eval_k, seed=cell.seed)
  diagnostics = {}
  for n in trained:
    for key in DIAGNOSTICS:
      vals = [r[f"{n}/{key}"] for r in records
              if r.get(f"{n}/{key}") is not None and np.isfinite(r[f"{n}/{key}"])]
      if vals:
        diagnostics[f"{n}/{key}"] = float(np.mean(vals))
  out = {"cell": dataclasses.asdict(cell), "steps": steps, "eval_k": eval_k,
         "pair": run_key(pair, config_file),
         "pass1": {n: evals[n]["average"] for n in trained},
         "pass1_t06": {n: evals[n]["t06"]["average"] for n in trained},
         "pass1_groups": {n: evals[n]["pass1"] for n in trained},
         "diagnostics": diagnostics, "curve": validation_curve(records, trained),
         **toy_costs.cell_costs(records),
         "code": code_version.current(),
         "seconds": time.perf_counter() - t0}
  path = cell_path(cell, out_dir)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(out, indent=1))
  return out


def validation_curve(records, names) -> list[dict]:
  """``[{"step": s, "<model>/eval": pass@1}]`` at each validation during training (held-out
  problems at T=1, ``toy_compare.VALIDATION_PER_FAMILY`` per family); steps count from 1."""
  rows = [{"step": r["step"] + 1, **{f"{n}/eval": r[f"{n}/eval/average"] for n in names
                                     if r.get(f"{n}/eval/average") is not None}}
          for r in records]
  return [row for row in rows if len(row) > 1]


def record_path(cell: Cell, record_dir) -> pathlib.Path:
  """Where the cell's result is kept in the repository (``s0/grpo8.json``)."""
  return pathlib.Path(record_dir) / f"{cell.slug}.json"


def load_cell(cell: Cell, out_dir, *, steps: int, eval_k: int,
              pair_key: str | None = None, record_dir=None) -> dict | None:
  """A finished cell's result, if one exists for the same step budget, eval k and (when
  ``pair_key`` is given) the same ``run_key``: a cell of an older pair or toy config is
  run again. Looked for in the cell's workdir, then in ``record_dir``."""
  for path in [cell_path(cell, out_dir)] + ([record_path(cell, record_dir)] if record_dir
                                            else []):
    if not path.exists():
      continue
    res = json.loads(path.read_text())
    same = (res.get("steps"), res.get("eval_k")) == (steps, eval_k)
    if same and (pair_key is None or res.get("pair") == pair_key):
      return res
  return None


def _record(cell: Cell, res: dict, record_dir) -> None:
  if record_dir:
    path = record_path(cell, record_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1) + "\n")


def run_cells(cells, out_dir, *, steps: int, eval_k: int, jobs: int, cell_argv,
              run_here=None, poll_s: float = 2.0, pair_key: str | None = None,
              record_dir=None) -> dict:
  """Runs every unfinished cell, ``jobs`` at a time; returns ``{slug: result}``.

  With ``jobs == 1`` each cell runs in this process through ``run_here(cell)``;
  otherwise each runs as the subprocess ``cell_argv(cell)`` (its log goes to
  ``<workdir>/cell.log``). A cell starts only after the cell it ``needs``. Finished cells
  are reused only for the same ``steps``, ``eval_k`` and ``pair_key`` (`load_cell`).
  Each finished cell's result is also copied to ``record_dir`` (kept in the repository,
  so the tables can be regenerated, and a benchmark continued, without the workdirs);
  a recorded cell whose peer logs a pending replay cell needs is run again.
  A failed cell is logged and left out; the rest go on. A stop signal is not a
  failure: the cells running save and stop, none starts, and ``job_signals.JobStopped``
  is raised (exit 75 under the launchers' console); the same call resumes them.
  """
  load = functools.partial(load_cell, out_dir=out_dir, steps=steps, eval_k=eval_k,
                           pair_key=pair_key, record_dir=record_dir)
  results = {c.slug: r for c in cells if (r := load(c)) is not None}
  for c in cells:
    if (c.slug not in results and c.needs in results
        and not (pathlib.Path(out_dir) / c.needs / "peer_logs").is_dir()):
      del results[c.needs]  # its logs are not here: train it again
  pending = [c for c in cells if c.slug not in results]
  for c in cells:
    if c.slug in results:
      _record(c, results[c.slug], record_dir)
  planned = {c.slug for c in cells}
  failed: set[str] = {c.needs for c in pending
                      if c.needs and c.needs not in planned and c.needs not in results}
  if results:
    log.info("%d cells already done, %d to run", len(results), len(pending))
  running: dict[str, tuple] = {}
  halted: dict[str, job_signals.Halted] = {}
  with (job_signals.job_stop() if jobs == 1 else job_signals.Driver(
      lambda s: job_signals.signal_all([p for _, p, _ in running.values()], s))) as stop:
    while pending or running:
      if stop.signum:  # no cell starts after a stop signal; the running ones save and stop
        halted.update({c.slug: job_signals.Halted(stop.signum) for c in pending})
        pending.clear()
        if jobs > 1 and stop.overdue():
          job_signals.kill([p.pid for _, p, _ in running.values()])
      for slug, (cell, proc, t0) in list(running.items()):
        if proc.poll() is None:
          continue
        del running[slug]
        res = load_cell(cell, out_dir, steps=steps, eval_k=eval_k, pair_key=pair_key)
        if proc.returncode == 0 and res is not None:
          results[slug] = res
          _record(cell, res, record_dir)
          log.info("%s done in %.0fs: %s", slug, time.perf_counter() - t0, res["pass1"])
        elif stop.signum:  # saved where it stopped (exit 75), or ended before it began
          halted[slug] = job_signals.Halted(stop.signum, started=True)
        else:
          failed.add(slug)
          log.error("%s failed (exit %s); see %s", slug, proc.returncode,
                    pathlib.Path(out_dir) / slug / "cell.log")
      for cell in list(pending):
        if cell.needs in failed:
          pending.remove(cell)
          failed.add(cell.slug)
          log.error("%s skipped: %s failed", cell.slug, cell.needs)
          continue
        if cell.needs and cell.needs not in results:
          continue
        if jobs == 1:
          pending.remove(cell)
          t0 = time.perf_counter()
          try:
            res = job_signals.run_task(run_here, cell)
          except Exception:  # pylint: disable=broad-except
            log.exception("%s failed", cell.slug)
            failed.add(cell.slug)
            continue
          if isinstance(res, job_signals.Halted):
            halted[cell.slug] = res
            continue
          results[cell.slug] = res
          _record(cell, res, record_dir)
          log.info("%s done in %.0fs: %s", cell.slug, time.perf_counter() - t0, res["pass1"])
        elif len(running) < jobs:
          pending.remove(cell)
          logfile = pathlib.Path(out_dir) / cell.slug / "cell.log"
          logfile.parent.mkdir(parents=True, exist_ok=True)
          with open(logfile, "w") as f:
            proc = subprocess.Popen(cell_argv(cell), stdout=f, stderr=subprocess.STDOUT,
                                    **job_signals.subprocess_options())
          running[cell.slug] = (cell, proc, time.perf_counter())
      if running:
        time.sleep(poll_s)
  if failed:
    log.error("failed cells: %s", sorted(failed))
  job_signals.stop_if_halted(stop.signum, {**results, **halted})
  return results


def aggregate(cells, results: dict, names, *, steps: int, eval_k: int) -> dict:
  """``{label: {model: [pass@1 per seed]}}`` at T=1 (``cells``) and T=0.6 / top-p 0.95
  (``cells_t06``), per family group, the diagnostics, and the validation curves
  (``curves[label][model][step]``: pass@1 per seed), in plan order."""
  table: dict = {}
  table_t06: dict = {}
  groups: dict = {}
  diagnostics: dict = {}
  curves: dict = {}  # label -> model -> step -> [validation pass@1 per seed]
  seeds_of: dict = {}  # label -> model -> the seed of each entry of cells[label][model]
  codes = []  # the code version of each cell present
  for cell in cells:
    res = results.get(cell.slug)
    if res is None:
      continue
    codes.append(res.get("code", ""))
    for n, v in res["pass1"].items():
      table.setdefault(cell.label, {}).setdefault(n, []).append(v)
      seeds_of.setdefault(cell.label, {}).setdefault(n, []).append(cell.seed)
    for n, per_group in res.get("pass1_groups", {}).items():
      for g, v in per_group.items():
        groups.setdefault(cell.label, {}).setdefault(f"{n} {g}", []).append(v)
    for k, v in res["diagnostics"].items():
      diagnostics.setdefault(cell.label, {}).setdefault(k, []).append(v)
    for n, v in res.get("pass1_t06", {}).items():
      table_t06.setdefault(cell.label, {}).setdefault(n, []).append(v)
    for row in res.get("curve", []):
      for key, v in row.items():
        if key.endswith("/eval"):
          per_step = curves.setdefault(cell.label, {}).setdefault(key[:-len("/eval")], {})
          per_step.setdefault(str(row["step"]), []).append(v)
  seeds = sorted({c.seed for c in cells})
  return {"names": list(names), "cells": table, "cell_seeds": seeds_of, "cells_t06": table_t06,
          "groups": groups,
          "diagnostics": diagnostics, "curves": curves, "seeds": seeds,
          "costs": toy_costs.per_seed(cells, results, skip=(INITIAL,)),
          "codes": codes, "steps": steps, "eval_k": eval_k}


def _mean_std(values) -> str:
  """Mean ± sample std in percent; the value alone for a single seed (no spread to show)."""
  v = np.asarray(values, np.float64) * 100
  return f"{v.mean():.2f} ± {v.std(ddof=1):.2f}" if len(v) > 1 else f"{v.mean():.2f}"


def results_markdown(res: dict, command: str, machine: str = "", figure: str | None = None,
                     regime: str = "default") -> str:
  """RESULTS.md: pass@1 per method and updated model (mean ± std over seeds), then diagnostics;
  ``figure``: a path (relative to the document) of the curves to link under the first table."""
  names = res["names"]
  base = res["cells"].get("GRPO n=8", {})
  title = "Toy benchmark tables" + ("" if regime == "default" else f", {regime} regime")
  lines = [f"## {title} (generated)", "", f"Command: `{command}`", ""]
  if machine:
    lines += [f"Machine: {machine}", ""]
  if "codes" in res:
    lines += [code_version.summary(res["codes"]), ""]
  lines += [f"Held-out pass@1 (%) of the updated model on the toy pair (average of the "
            f"addition and multiplication families), k={res['eval_k']} samples at T=1.0, "
            f"after {res['steps']} steps; mean ± std (ddof=1) over seeds {res['seeds']}. Each "
            "model's peer is the other one. Δ is against GRPO n=8, paired by seed. "
            + toy_costs.NOTE, "",
            "| method | " + " | ".join(f"{n} (peer {m}) | Δ" for n, m in zip(names, names[::-1]))
            + " | mean | " + " | ".join(toy_costs.COLUMNS) + " |",
            "|---" * (2 * len(names) + 2 + len(toy_costs.COLUMNS)) + "|"]
  for label, per_model in res["cells"].items():
    row, means = [], []
    for n in names:
      v = per_model.get(n)
      if not v:
        row += ["n/a", ""]
        continue
      means.append(np.mean(v))
      b = base.get(n)
      delta = (f"{100 * (np.mean(v) - np.mean(b[:len(v)])):+.2f}"
               if b and label not in ("GRPO n=8", INITIAL) else "")
      row += [_mean_std(v), delta]
    lines.append(f"| {label} | " + " | ".join(row) + f" | {100 * np.mean(means):.2f} | "
                 + " | ".join(toy_costs.row_cells(res.get("costs", {}), label)) + " |")
  lines += ["", toy_costs.comparison(res)]
  if res.get("cell_seeds"):
    lines += ["", toy_sign_table.sign_markdown(res)]
  if figure:
    lines += ["", f"![held-out pass@1 over training, every method]({figure})", "",
              "Held-out pass@1 over training, mean ± std over seeds (step 0: the initial pair "
              "on the whole held-out set; later points: the validations during training, "
              f"{toy_compare.VALIDATION_PER_FAMILY} problems per family, one sample at T=1)."]
  if res.get("cells_t06"):
    lines += ["", t06_markdown(res)]
  if res.get("groups"):
    lines += ["", groups_markdown(res)]
  lines += ["", diagnostics_markdown(res)]
  return "\n".join(lines) + "\n"


def markers(name: str = "toy_benchmark") -> tuple[str, str]:
  """The BEGIN / END comments around a generated section of RESULTS.md."""
  return f"<!-- {name}: begin generated -->", f"<!-- {name}: end generated -->"


BEGIN, END = markers()


def splice(document: str, generated: str, name: str = "toy_benchmark") -> str:
  """``document`` with the text between section ``name``'s BEGIN / END markers replaced
  by ``generated`` (appended with its markers when absent); the hand-written rest is left
  as it is."""
  begin, end = markers(name)
  block = f"{begin}\n{generated.rstrip()}\n{end}"
  if begin in document and end in document:
    head, rest = document.split(begin, 1)
    return head + block + rest.split(end, 1)[1]
  return document.rstrip() + "\n\n" + block + "\n"


def t06_markdown(res: dict) -> str:
  """The same held-out problems sampled at T=0.6, top-p 0.95 (the paper's evaluation setting)."""
  names = res["names"]
  lines = ["Held-out pass@1 (%) at T=0.6, top-p 0.95 (same problems and k), mean ± std over "
           "seeds:", "", "| method | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
  for label, per_model in res["cells_t06"].items():
    lines.append(f"| {label} | " + " | ".join(
        _mean_std(per_model[n]) if per_model.get(n) else "n/a" for n in names) + " |")
  return "\n".join(lines)


def groups_markdown(res: dict) -> str:
  """Pass@1 per model and family group (mean over seeds), where the exchange should act."""
  cols = list(dict.fromkeys(c for per in res["groups"].values() for c in per))
  lines = ["Held-out pass@1 (%) per model and family group, mean over seeds:", "",
           "| method | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
  for label, per in res["groups"].items():
    lines.append(f"| {label} | " + " | ".join(
        f"{100 * np.mean(per[c]):.1f}" if c in per else "" for c in cols) + " |")
  return "\n".join(lines)


def diagnostics_markdown(res: dict) -> str:
  """Per exchange method and receiver: mean per step of the exchange figures (over steps and seeds)."""
  cols = [("grafted groups", "exchange/grafted_groups"), ("offered", "exchange/peer_offered"),
          ("admitted", "exchange/admitted"), ("s p50", "exchange/s_p50"),
          ("complementarity", "exchange/complementarity"), ("all-fail share", "all_fail"),
          ("dropped empty", "exchange/dropped_empty"), ("clip peer tok.", "update/clip_frac_graft"),
          ("clip own tok.", "update/clip_frac_own")]
  lines = ["Exchange diagnostics, mean per step over steps and seeds (per receiver):", "",
           "| method | receiver | " + " | ".join(c for c, _ in cols) + " |",
           "|---" * (len(cols) + 2) + "|"]
  for label, diag in res["diagnostics"].items():
    for n in res["names"]:
      if f"{n}/exchange/peer_offered" not in diag and f"{n}/exchange/grafted_groups" not in diag:
        continue
      vals = [f"{np.mean(diag[f'{n}/{k}']):.3g}" if f"{n}/{k}" in diag else "" for _, k in cols]
      lines.append(f"| {label} | {n} | " + " | ".join(vals) + " |")
  return "\n".join(lines)


def default_cell_argv(script: str, out_dir, *, steps: int, eval_k: int, extra=()):
  """``cell -> argv`` that reruns ``script`` for just that cell (``extra``: more flags)."""
  def argv(cell: Cell):
    return [sys.executable, script, "--out", str(out_dir), "--steps", str(steps), "--eval-k",
            str(eval_k), *extra, "--cell", json.dumps(dataclasses.asdict(cell))]
  return argv
