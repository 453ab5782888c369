"""The toy benchmark's plan, scheduler and tables; a slow smoke run of the script on the tiny pair."""

import json
import types
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.toy import code_version, benchmark as tb

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_plan_has_every_method_per_seed_and_replay_after_grpo8():
  cells = tb.plan_cells([0, 1])
  assert len(cells) == 2 * (len(tb.METHODS) + 3)
  assert [c.slug for c in cells if c.label == tb.INITIAL] == ["s0/initial", "s1/initial"]
  assert len({c.slug for c in cells}) == len(cells)
  replay = [c for c in cells if c.label == tb.REPLAY]
  assert [(c.seed, c.swap) for c in replay] == [(0, False), (0, True), (1, False), (1, True)]
  slugs = [c.slug for c in cells]
  for c in replay:
    assert c.needs == f"s{c.seed}/grpo8" and slugs.index(c.needs) < slugs.index(c.slug)
  # Without GRPO n=8 there is nothing to replay.
  assert not [c for c in tb.plan_cells([0], {"GRAFT": "graft"}) if c.label == tb.REPLAY]


def _write(cell, out, pass1, pair="k1"):
  path = tb.cell_path(cell, out)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"steps": 3, "eval_k": 2, "pair": pair, "pass1": pass1,
                              "diagnostics": {}}))
  return json.loads(path.read_text())


def test_run_cells_in_process_respects_dependencies_and_skips_finished(tmp_path):
  cells = tb.plan_cells([0], {"GRPO n=8": "grpo8", "GRAFT": "graft"})
  graft = next(c for c in cells if c.label == "GRAFT")
  done = tb.cell_path(graft, tmp_path)
  _write(graft, tmp_path, {"a": 0.5, "b": 0.25})
  order = []

  def run_here(cell):
    order.append(cell.slug)
    return _write(cell, tmp_path, {"a": 0.1})

  res = tb.run_cells(cells, tmp_path, steps=3, eval_k=2, jobs=1, cell_argv=None,
                     run_here=run_here)
  assert order == ["s0/initial", "s0/grpo8", "s0/replay_0", "s0/replay_1"]
  assert set(res) == {c.slug for c in cells} and done.is_file()
  # A result from another step budget is not reused.
  order.clear()
  tb.run_cells(cells, tmp_path, steps=4, eval_k=2, jobs=1, cell_argv=None,
               run_here=lambda c: order.append(c.slug) or _write(c, tmp_path, {}))
  assert len(order) == len(cells)
  # Nor one of another toy pair: every cell above was written for pair "k1".
  order.clear()
  tb.run_cells(cells, tmp_path, steps=3, eval_k=2, jobs=1, cell_argv=None, pair_key="k1",
               run_here=lambda c: order.append(c.slug) or _write(c, tmp_path, {}))
  assert order == []
  tb.run_cells(cells, tmp_path, steps=3, eval_k=2, jobs=1, cell_argv=None, pair_key="k2",
               run_here=lambda c: order.append(c.slug) or _write(c, tmp_path, {}, pair="k2"))
  assert len(order) == len(cells)


def test_run_cells_subprocesses_skip_dependants_of_a_failed_cell(tmp_path):
  cells = tb.plan_cells([0], {"GRPO n=8": "grpo8", "GRAFT": "graft"})
  script = ("import json, pathlib, sys; cell = json.loads(sys.argv[2]); "
            "sys.exit(3) if cell['label'] == 'GRPO n=8' else None; "
            "p = pathlib.Path(sys.argv[1]) / cell['slug'] / 'cell.json'; "
            "p.write_text(json.dumps({'steps': 3, 'eval_k': 2, 'pass1': {'a': 0.3}, "
            "'diagnostics': {}}))")
  argv = lambda cell: [sys.executable, "-c", script, str(tmp_path), json.dumps(
      {"slug": cell.slug, "label": cell.label})]
  res = tb.run_cells(cells, tmp_path, steps=3, eval_k=2, jobs=2, cell_argv=argv, poll_s=0.05)
  assert set(res) == {"s0/initial", "s0/graft"}
  assert (tmp_path / "s0" / "grpo8" / "cell.log").is_file()


def test_results_markdown_mean_std_and_paired_delta():
  res = {"names": ["a", "b"], "seeds": [0, 1, 2], "steps": 5, "eval_k": 4,
         "cells": {"GRPO n=8": {"a": [0.10, 0.20, 0.30], "b": [0.5, 0.5, 0.5]},
                   "GRAFT": {"a": [0.20, 0.20, 0.50], "b": [0.4, 0.5, 0.6]}},
         "groups": {"GRAFT": {"a add": [0.1, 0.2, 0.6], "b mul": [0.5]}},
         "diagnostics": {"GRAFT": {"a/exchange/peer_offered": [8.0, 16.0],
                                   "a/exchange/admitted": [2.0, 4.0]}}}
  text = tb.results_markdown(res, "python launch/toy_benchmark.py", "2-core CPU")
  table = text.split("per model and family group")[0]
  rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()
          if line.startswith("| GR")}
  # GRPO a: mean 20, sample std 10; GRAFT a: mean 30, std of (20, 20, 50) = 17.32.
  assert "| 20.00 ± 10.00 |  |" in rows["GRPO n=8"]
  assert "| 30.00 ± 17.32 | +10.00 | 50.00 ± 10.00 | +0.00 | 40.00 |" in rows["GRAFT"]
  assert "| GRAFT | a | " in text and "| 12 | 3 |" in text  # offered, admitted means
  assert "Machine: 2-core CPU" in text
  assert "| method | a add | b mul |" in text and "| GRAFT | 30.0 | 50.0 |" in text
  one_seed = dict(res, seeds=[0], cells={k: {n: v[:1] for n, v in per.items()}
                                         for k, per in res["cells"].items()})
  rows = tb.results_markdown(one_seed, "cmd").split("per model and family group")[0]
  assert "| GRAFT | 20.00 | +10.00 | 40.00 | -10.00 | 30.00 |" in rows  # no "± 0.00"


def test_splice_replaces_only_the_generated_block():
  doc = "# Results\n\nHand-written analysis.\n"
  once = tb.splice(doc, "| t | 1 |")
  assert once.startswith(doc.rstrip()) and f"{tb.BEGIN}\n| t | 1 |\n{tb.END}" in once
  twice = tb.splice(once + "\nMore analysis after.\n", "| t | 2 |")
  assert "| t | 1 |" not in twice and "| t | 2 |" in twice
  assert twice.count(tb.BEGIN) == 1 and twice.endswith("More analysis after.\n")
  assert "Hand-written analysis." in twice
  both = tb.splice(twice, "| f | 1 |", name="toy_benchmark_friction")
  assert "| t | 2 |" in both and "| f | 1 |" in both  # sections of two regimes side by side
  assert tb.splice(both, "| f | 2 |", name="toy_benchmark_friction").count("| f |") == 1


def test_the_friction_regimes_config_differs_only_in_minibatches_and_paths():
  """Four minibatches, HACPO's matching minibatch size, the warm-up in updates that ends at
  the same training step, and the pair's paths: nothing else."""
  pair = types.SimpleNamespace(key="abc")
  assert tb.run_key(pair, "configs/toy_friction.py") != tb.run_key(pair)
  toy_cd = tb.config_lib.load_config("configs/toy.py:graft")
  fr_cd = tb.config_lib.load_config("configs/toy_friction.py:graft")
  flat = lambda cd: tb.flatten(tb.config_lib.to_dict(tb.config_lib.from_config_dict(cd)))
  a, b = flat(toy_cd), flat(fr_cd)
  assert {k for k in a if a[k] != b[k]} == {
      "num_minibatches", "hacpo.minibatch_prompts", "optimizer.warmup_steps", "workdir",
      "model_a.path", "model_b.path"}
  assert b["num_minibatches"] == 4 and b["hacpo.minibatch_prompts"] * 4 == b["prompts_per_step"]
  # 10 updates at 2 per step and 20 at 4 per step: both ramps end after step 5.
  assert (a["optimizer.warmup_steps"], b["optimizer.warmup_steps"]) == (10, 20)


@pytest.mark.slow
def test_benchmark_script_smoke_runs_cells_in_parallel(tmp_path):
  # The friction regime: its tiny pair, its config file and its own RESULTS.md section.
  proc = subprocess.run(
      [sys.executable, "launch/toy_benchmark.py", "--smoke", "--regime", "friction",
       "--seeds", "0", "--steps", "1",
       "--eval-k", "1", "--jobs", "2", "--only", "GRPO n=8", "GRAFT", "--out", str(tmp_path),
       "--results", str(tmp_path / "RESULTS.md"), "--figure", str(tmp_path / "fig" / "curves.png")],
      cwd=ROOT, capture_output=True, text=True, timeout=1800)
  assert proc.returncode == 0, proc.stderr[-4000:]
  text = (tmp_path / "RESULTS.md").read_text()
  for label in (tb.INITIAL, "GRPO n=8", "GRAFT", tb.REPLAY):
    assert f"| {label} |" in text
  bench = json.loads((tmp_path / "benchmark.json").read_text())
  assert set(bench["cells"][tb.REPLAY]) == set(bench["names"])  # one trained model per direction
  for cell in ("initial", "grpo8", "graft", "replay_0", "replay_1"):
    assert (tmp_path / "s0" / cell / "cell.json").is_file()
  # The one step is validated (the last step always is), for both trained models.
  graft = json.loads((tmp_path / "s0" / "graft" / "cell.json").read_text())
  assert [sorted(r) for r in graft["curve"]] == [sorted(["step", *(f"{n}/eval" for n in bench["names"])])]
  assert graft["curve"][0]["step"] == 1
  # One step: it is step 0, compilation and all, kept apart from the cost.
  assert graft["cost"] == {} and graft["cost_first_step"]["device_s"] > 0
  assert (tmp_path / "fig" / "curves.png").stat().st_size > 10_000
  assert "](fig/curves.png)" in text
  assert "T=0.6, top-p 0.95" in text
  begin, end = tb.markers("toy_benchmark_friction")
  assert text.count(begin) == 1 and text.count(end) == 1 and tb.BEGIN not in text
  assert "friction regime (generated)" in text and "Sign table" in text
  assert graft["pair"] == tb.run_key(types.SimpleNamespace(key=graft["pair"].split("-")[0]),
                                     "configs/toy_friction.py")
  code = code_version.current()
  assert graft["code"] == code and f"Code the cells ran on: `{code}` 5 cells." in text


def test_run_key_changes_with_the_toy_configs_math_not_its_logging(monkeypatch):
  pair = types.SimpleNamespace(key="abc")
  base = tb.run_key(pair)
  assert base.startswith("abc-") and tb.run_key(pair) == base
  real = tb.config_lib.load_config

  def edited(field, value):
    def load(spec):
      cd = real(spec)
      with cd.unlocked():
        tb.config_lib.config_load.set_field(cd, field, value)
      return cd
    return load

  monkeypatch.setattr(tb.config_lib, "load_config", edited("optimizer.lr", 1.5e-4))
  assert tb.run_key(pair) != base
  monkeypatch.setattr(tb.config_lib, "load_config", edited("logging.tensorboard", False))
  assert tb.run_key(pair) == base
  assert tb.run_key(types.SimpleNamespace(key="other")) != base


def test_validation_curve_keeps_validated_steps_and_present_models_only():
  records = [{"step": 0, "a/reward_mean": 0.1},
             {"step": 4, "a/eval/average": 0.25, "b/eval/average": 0.5},
             {"step": 9, "a/eval/average": 0.75}]  # b replayed: never validated
  assert tb.validation_curve(records, ["a", "b"]) == [
      {"step": 5, "a/eval": 0.25, "b/eval": 0.5}, {"step": 10, "a/eval": 0.75}]


def test_figure_series_starts_at_the_initial_cell_and_averages_seeds():
  from benchmarks.toy import figure as fig
  res = {"cells": {tb.INITIAL: {"a": [0.2, 0.4]}},
         "curves": {"GRAFT": {"a": {"10": [0.5, 0.7], "5": [0.4, 0.4]}}}}
  steps, mean, std = fig.series(res, "GRAFT", "a")
  assert steps.tolist() == [0, 5, 10]  # numeric order, not the keys' string order
  np.testing.assert_allclose(mean, [30.0, 40.0, 60.0])
  np.testing.assert_allclose(std, [np.sqrt(200.0), 0.0, np.sqrt(200.0)])  # ddof=1
  assert fig.series(res, "HACPO", "a") is None


def test_figure_draws_no_two_labels_alike():
  from benchmarks.toy import figure as fig
  labels = [f"row {i}" for i in range(40)]  # the friction benchmark draws 17
  styles = fig.line_styles(labels)
  assert len(set(styles.values())) == len(labels)
  assert styles["row 0"] == fig.line_styles(["row 0", "other"])["row 0"]


def test_finished_cells_are_recorded_and_reused_from_the_record(tmp_path):
  cells = tb.plan_cells([0], {"GRPO n=8": "grpo8", "GRAFT": "graft"})
  record = tmp_path / "record"

  def run_here(cell, out):
    if cell.label == tb.REPLAY:  # a replay reads the GRPO cell's peer logs
      assert (out / cell.needs / "peer_logs").is_dir(), cell.slug
    if cell.label == "GRPO n=8":
      (out / cell.slug / "peer_logs").mkdir(parents=True)
    order.append(cell.slug)
    return _write(cell, out, {"a": 0.1 * len(order)})

  order = []
  first = tmp_path / "first"
  res = tb.run_cells(cells, first, steps=3, eval_k=2, jobs=1, cell_argv=None, pair_key="k1",
                     run_here=lambda c: run_here(c, first), record_dir=record)
  assert sorted(p.relative_to(record).as_posix() for p in record.rglob("*.json")) == sorted(
      f"{c.slug}.json" for c in cells)
  assert json.loads((record / "s0" / "graft.json").read_text()) == res["s0/graft"]
  # Another workdir (a fresh clone): nothing is trained again; the same results.
  order.clear()
  second = tmp_path / "second"
  again = tb.run_cells(cells, second, steps=3, eval_k=2, jobs=1, cell_argv=None,
                       pair_key="k1", run_here=lambda c: run_here(c, second), record_dir=record)
  assert order == [] and again == res
  # A replay cell still to run needs its GRPO cell's peer logs: that cell runs again first.
  (record / "s0" / "replay_1.json").unlink()
  tb.run_cells(cells, second, steps=3, eval_k=2, jobs=1, cell_argv=None, pair_key="k1",
               run_here=lambda c: run_here(c, second), record_dir=record)
  assert order == ["s0/grpo8", "s0/replay_1"]
  # A record of another toy pair is not reused.
  order.clear()
  third = tmp_path / "third"
  tb.run_cells(cells, third, steps=3, eval_k=2, jobs=1, cell_argv=None, pair_key="k2",
               run_here=lambda c: run_here(c, third), record_dir=record)
  assert len(order) == len(cells)


def test_run_key_ignores_added_fields_at_their_default(monkeypatch):
  """Recorded cells keep their key when a field is added at the math they ran."""
  pair = types.SimpleNamespace(key="abc")
  base = tb.run_key(pair)
  real = tb.config_lib.to_dict

  def without(cfg):
    out = real(cfg)
    for field in tb.ADDED_FIELDS:
      section, name = field.split(".")
      out.get(section, {}).pop(name, None)
    return out

  monkeypatch.setattr(tb.config_lib, "to_dict", without)
  assert tb.run_key(pair) == base
  monkeypatch.undo()
  real_load = tb.config_lib.load_config

  def load(spec):
    cd = real_load(spec)
    with cd.unlocked():
      tb.config_lib.config_load.set_field(cd, "sgt.prompts", "graft_selected")
    return cd

  monkeypatch.setattr(tb.config_lib, "load_config", load)
  assert tb.run_key(pair) != base
