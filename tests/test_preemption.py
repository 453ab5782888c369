"""SIGTERM anywhere, then the same command: nothing lost beyond the step in flight, and the run
ends as if never stopped; a second signal ends it at once; a second trainer is refused.

The tiny run of ``tests/train/kill_child`` (3 steps, a checkpoint after every
step, validation after steps 1 and 2) is stopped by SIGTERM during sampling
(the step is abandoned), during a checkpoint write and at the end of the
update, once its optimizer steps have taken over the old parameters (the step
finishes), and once by two signals (validation, then the checkpoint write: the
process ends at once with 128 + 15), once lone during validation (the step is
kept with its held-out scores), and once at the end of a fresh run's first update
(the step is dropped: there is nothing to save yet). After each stop the checkpoint
saved is that of the last completed step, and the metrics rows are exactly the
completed steps. The final parameters (bitwise), rows and peer logs equal those of
one uninterrupted run, shared by the tests of this module.
"""

import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from graft_jax import cli
from graft_jax import preemption
from graft_jax.outputs import checkpoint
from graft_jax.outputs import workdir_lock
from graft_jax.outputs.metrics_writer import read_jsonl
from tests.train import test_kill_points as kill_points

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS = kill_points.STEPS  # 3


def _env(cache):
  return dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PLATFORMS="cpu",
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
              JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


def _start(workdir, cache, log, *points):
  args = [sys.executable, "-m", "tests.train.kill_child", str(workdir), str(STEPS), *points]
  with open(log, "wb") as out:
    return subprocess.Popen(args, cwd=ROOT, env=_env(cache), stdout=out,
                            stderr=subprocess.STDOUT)


def _child(workdir, cache, log, *points) -> tuple[int, str]:
  proc = _start(workdir, cache, log, *points)
  try:
    code = proc.wait(timeout=900)
  finally:
    if proc.poll() is None:
      os.kill(proc.pid, signal.SIGKILL)
      proc.wait()
  return code, pathlib.Path(log).read_text(errors="replace")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """An uninterrupted run and the compilation cache it filled."""
  root = tmp_path_factory.mktemp("preemption")
  code, out = _child(root / "ref", root / "jax_cache", root / "ref.log")
  assert code == 0, out[-3000:]
  return root


def _params(workdir):
  with np.load(workdir / "final_params.npz") as f:
    return {k: f[k] for k in f.files}


def _committed(workdir):
  return sorted(int(p.parent.name) for p in (workdir / "checkpoints").glob(
      f"*/{checkpoint.COMMIT_MARKER}") if p.parent.name.isdigit())


def _assert_same_run(got, want):
  assert kill_points._rows(got) == kill_points._rows(want)
  assert kill_points._log_digests(got) == kill_points._log_digests(want)
  g, w = _params(got), _params(want)
  assert sorted(g) == sorted(w)
  for key in w:
    np.testing.assert_array_equal(g[key], w[key], err_msg=key)


def _stopped_line(step: int) -> str:
  return f"stopped by SIGTERM after step {step}; checkpoint {step} saved; the same command resumes"


@pytest.mark.slow
def test_stopped_anywhere_then_rerun_equals_uninterrupted(reference, tmp_path):
  cache, cut = reference / "jax_cache", tmp_path / "cut"
  # (points, the step in flight, whether it finishes or is abandoned)
  attempts = [(["term:sampling@0"], 0, False),
              (["term:checkpoint_write@0+20"], 0, True),
              (["term:update_end@1"], 1, True)]
  for i, (points, in_flight, finishes) in enumerate(attempts):
    code, out = _child(cut, cache, tmp_path / f"stop{i}.log", *points)
    assert code == cli.STOPPED_EXIT, (points, code, out[-3000:])
    done = len(read_jsonl(cut / "metrics.jsonl")) if (cut / "metrics.jsonl").exists() else 0
    assert out.splitlines()[-1] == _stopped_line(done), (points, out[-3000:])
    assert "Traceback" not in out, out[-3000:]
    # Lost at most the step in flight; the checkpoint is the last completed step's.
    assert done == in_flight + finishes, (points, done)
    assert _committed(cut)[-1] == done
    assert [r["step"] for r in read_jsonl(cut / "metrics.jsonl")] == list(range(done))
    assert not (cut / "trainer.lock").exists()  # released on the way out

  # A second signal, during the checkpoint write of the last step: the process ends at once.
  code, out = _child(cut, cache, tmp_path / "abort.log", "term:validation@2",
                     "term:checkpoint_write@2")
  assert code == 128 + signal.SIGTERM, out[-3000:]
  assert "second SIGTERM: ending at once" in out
  assert _committed(cut)[-1] in (2, 3)

  code, out = _child(cut, cache, tmp_path / "resume.log")
  assert code == 0, out[-3000:]
  _assert_same_run(cut, reference / "ref")
  assert not list((cut / "checkpoints").glob("*orbax-checkpoint-tmp*"))


@pytest.mark.slow
def test_a_fresh_runs_first_step_stops_at_once_with_nothing_to_save(reference, tmp_path):
  """Its first model's update has taken over the old parameters and the second's has yet to
  compile, which can outlast a kill grace: the step is dropped, as nothing before it needs
  saving, and the same command starts the run again to the reference's end."""
  cache, cut = reference / "jax_cache", tmp_path / "cut"
  code, out = _child(cut, cache, tmp_path / "stop.log", "term:update_end@0")
  assert code == cli.STOPPED_EXIT, out[-3000:]
  assert out.splitlines()[-1] == ("stopped by SIGTERM during step 1, before any step completed; "
                                  "nothing to save; the same command resumes"), out[-3000:]
  assert "Traceback" not in out and _committed(cut) == [], out[-3000:]
  assert not (cut / "metrics.jsonl").exists() or not read_jsonl(cut / "metrics.jsonl")
  code, out = _child(cut, cache, tmp_path / "resume.log")
  assert code == 0, out[-3000:]
  _assert_same_run(cut, reference / "ref")


@pytest.mark.slow
def test_a_lone_signal_during_validation_keeps_the_step_and_its_scores(reference, tmp_path):
  """Validation runs after the update: the step is complete, so it is not abandoned;
  validation finishes, the row (with its held-out scores) and checkpoint are saved."""
  cache, cut = reference / "jax_cache", tmp_path / "cut"
  code, out = _child(cut, cache, tmp_path / "stop.log", "term:validation@1")
  assert code == cli.STOPPED_EXIT, out[-3000:]
  assert out.splitlines()[-1] == _stopped_line(2), out[-3000:]
  rows = read_jsonl(cut / "metrics.jsonl")
  assert [r["step"] for r in rows] == [0, 1] and _committed(cut)[-1] == 2
  assert {"toy_a/eval/average", "toy_b/eval/average", "time/eval_s"} <= set(rows[1])
  code, out = _child(cut, cache, tmp_path / "resume.log")
  assert code == 0, out[-3000:]
  _assert_same_run(cut, reference / "ref")


def _tree_digest(folder: pathlib.Path) -> dict:
  return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_second_trainer_on_the_workdir_is_refused_in_one_line(reference, tmp_path):
  cache, work = reference / "jax_cache", tmp_path / "work"
  first = _start(work, cache, tmp_path / "first.log")
  try:
    lock = work / "trainer.lock"
    deadline = time.monotonic() + 300
    while not (lock.exists() and lock.read_text().strip()) and first.poll() is None:
      assert time.monotonic() < deadline
      time.sleep(0.05)
    os.kill(first.pid, signal.SIGSTOP)  # the first run holds the workdir
    held = lock.read_text()
    code, out = _child(work, cache, tmp_path / "second.log")
    assert (code, out.splitlines()) == (cli.USAGE_EXIT, [
        f"workdir busy error: {work} is in use by a trainer: "
        f"{workdir_lock.describe(json.loads(held))}; wait for it to end, stop it, or pass "
        f"another --workdir"])
    assert lock.read_text() == held
  finally:
    os.kill(first.pid, signal.SIGCONT)
    code = first.wait(timeout=900)
  assert code == 0, (tmp_path / "first.log").read_text()[-3000:]
  _assert_same_run(work, reference / "ref")
  # Byte for byte: the peer logs; the rows but for their timings.
  assert (_tree_digest(work / "peer_logs") == _tree_digest(reference / "ref" / "peer_logs"))
  assert not lock.exists()


def _watch_undo(stop, undoable, signum=signal.SIGTERM, **kw):
  """Sends ``signum`` to this process inside ``abandonable(undoable, **kw)``; returns whether
  the step was abandoned."""
  try:
    with stop.abandonable(undoable, **kw):
      os.kill(os.getpid(), signum)
      for _ in range(100):  # the handler runs between two bytecodes
        time.sleep(0.001)
  except preemption.StepAbandoned:
    return True
  return False


def test_the_first_signal_abandons_only_an_undoable_step():
  before = signal.getsignal(signal.SIGTERM)
  with preemption.StopSignals() as stop:
    assert not _watch_undo(stop, lambda: False) and stop.signum == signal.SIGTERM
  with preemption.StopSignals() as stop:
    assert _watch_undo(stop, lambda: True) and stop.agreed() == signal.SIGTERM
  assert signal.getsignal(signal.SIGTERM) == before


def test_a_fresh_runs_first_step_is_abandoned_anywhere_but_on_the_early_warning():
  for signum, abandoned in [(signal.SIGTERM, True), (signal.SIGINT, True),
                            (signal.SIGUSR1, False)]:
    with preemption.StopSignals() as stop:
      assert _watch_undo(stop, lambda: False, signum, anywhere=True) == abandoned, signum
      assert stop.signum == signum


def test_copies_of_a_signal_within_the_window_are_one_stop():
  window = preemption.DuplicateWindow(2.0)
  assert not window.repeated(100.0)  # the first
  assert not window.repeated(100.0) and not window.repeated(102.0)  # copies of it
  assert window.repeated(102.01) and window.repeated(200.0)  # a deliberate second
  assert preemption.DuplicateWindow().window_s == preemption.DUPLICATE_WINDOW_S


def test_a_second_signal_ends_the_process_at_once_even_inside_native_code():
  # The main thread blocks in a read that the kernel restarts after each signal
  # (SA_RESTART), as a long XLA call would keep it: Python-level handlers never run there,
  # yet the counter thread ends the process at the second signal. A copy of the first,
  # as a stop of every process delivers through a driver too, does not end it.
  script = ("import os, signal\n"
            "from graft_jax import preemption\n"
            "with preemption.StopSignals():\n"
            "  for s in preemption.STOP_SIGNALS:\n"
            "    signal.siginterrupt(s, False)\n"
            "  r, w = os.pipe()\n"
            "  print('ready', flush=True)\n"
            "  os.read(r, 1)\n")
  proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  try:
    assert proc.stdout.readline() == "ready\n"
    os.kill(proc.pid, signal.SIGUSR1)
    first = time.monotonic()
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)  # a copy: within the window
    time.sleep(0.5)
    assert proc.poll() is None  # the first only asks, and its copy changes nothing
    time.sleep(max(0.0, first + preemption.DUPLICATE_WINDOW_S + 0.3 - time.monotonic()))
    os.kill(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=30)
  finally:
    if proc.poll() is None:
      os.kill(proc.pid, signal.SIGKILL)
      proc.wait()
  assert code == 128 + signal.SIGTERM
  # (The first signal's line shows only when it came before the read began.)
  assert proc.stderr.read().splitlines()[-1] == ("second SIGTERM: ending at once; the last "
                                                 "committed checkpoint resumes")
