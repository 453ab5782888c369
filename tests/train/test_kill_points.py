"""kill -9 anywhere, or fill the disk, resume, and nothing is lost: the property over fault points.

One run is killed (SIGKILL, no cleanup) at one point of each phase: sampling,
the update, validation, the metrics write (torn half-way through the line) and
the checkpoint write, at steps and delays drawn from a seeded RNG; once more
its disk fills (``ulimit -f 0``) during a metrics or checkpoint write, which
must end it with one line naming the path and no traceback. It is resumed
after each fault. Its final parameters, metrics rows and peer logs must equal
those of the same run never interrupted. ``GRAFT_KILL_SEED`` draws other
points; every seed must pass.
"""

import os
import pathlib
import random
import signal
import subprocess
import sys

import numpy as np
import pytest

from graft_jax.outputs import peer_log
from graft_jax.outputs.metrics_writer import read_jsonl
from tests.train.kill_child import PHASES, TOO_LONG

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = 3  # validation after steps 1 and 2, a checkpoint after every step
NAMES = ("toy_a", "toy_b")


def fault_points(seed: int) -> list[tuple[str, int, int]]:
  """One kill (phase, step, delay_ms) per phase and one ``full:`` disk fault, in the order
  a run reaches them.

  Delay 0 kills on entry to the phase (``metrics_write``: tears the row);
  a delay lands somewhere inside the phase or just after it. Timed kills are
  never drawn on the last step, where the process could finish first.
  """
  rng = random.Random(seed)
  points = [
      ("sampling", rng.randrange(STEPS), rng.choice([0, rng.randrange(1, 200)])),
      ("update", rng.randrange(STEPS), rng.choice([0, rng.randrange(1, 200)])),
      ("validation", rng.choice([1, 2]), 0),
      ("metrics_write", rng.randrange(STEPS), 0),
      ("checkpoint_write", rng.randrange(STEPS - 1), rng.randrange(1, 60)),
      ("full:" + rng.choice(["metrics_write", "checkpoint_write"]), rng.randrange(STEPS), 0),
  ]
  points = [(ph, st, d if st < STEPS - 1 else 0) for ph, st, d in points]
  order = lambda p: (p[1], PHASES.index(p[0].removeprefix("full:")), not p[0].startswith("full:"))
  return sorted(points, key=order)


def _child(workdir, cache, log, point=None) -> int:
  """Runs the child to the end (or its fault); its console goes to ``log`` through a pipe,
  which the ``full:`` file size limit does not touch."""
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", JAX_PLATFORMS="cpu")
  args = [sys.executable, "-m", "tests.train.kill_child", str(workdir), str(STEPS)]
  if point:
    phase, step, delay = point
    args.append(f"{phase}@{step}+{delay}")
  proc = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, timeout=900)
  log.write_bytes(proc.stdout)
  return proc.returncode


def _rows(workdir):
  drop = lambda r: {k: v for k, v in r.items()
                    if not k.startswith("time") and not k.endswith("/eval/seconds")
                    and not k.endswith("device_s")}  # wall time x devices
  return [drop(r) for r in read_jsonl(workdir / "metrics.jsonl")]


def _log_digests(workdir):
  out = {}
  for name in NAMES:
    reader = peer_log.PeerLogReader(workdir / "peer_logs", name)
    out[name] = {s: reader.manifest(s)["sha256"] for s in reader.steps()}
    assert TOO_LONG not in reader.prompt_index()  # skipped before sampling
  return out


def test_killed_anywhere_and_resumed_equals_uninterrupted(tmp_path):
  seed = int(os.environ.get("GRAFT_KILL_SEED", "0"))
  cache = tmp_path / "jax_cache"  # the reference compiles; the killed runs reuse it
  ref, cut = tmp_path / "ref", tmp_path / "cut"
  assert _child(ref, cache, tmp_path / "ref.log") == 0, (tmp_path / "ref.log").read_text()[-3000:]

  points = fault_points(seed)
  logs = []
  for i, point in enumerate(points):
    logs.append(tmp_path / f"fault{i}.log")
    rc = _child(cut, cache, logs[-1], point)
    out = logs[-1].read_text()
    if point[0].startswith("full:"):
      # One line names the path; no traceback; everything closed before the exit.
      assert rc == 1, (point, rc, out[-3000:])
      lines = [line for line in out.splitlines() if "error" in line.lower()]
      written = "metrics.jsonl" if "metrics" in point[0] else "checkpoints"
      assert len(lines) == 1 and lines[0].startswith(f"storage error: cannot write {cut}/{written}")
      assert "file size limit exceeded" in lines[0]
      assert "Traceback" not in out and "Exception" not in out, out[-3000:]
    else:
      assert rc == -signal.SIGKILL, (point, rc, out[-3000:])
  logs.append(tmp_path / "resume.log")
  assert _child(cut, cache, logs[-1]) == 0, logs[-1].read_text()[-3000:]

  # The torn row was dropped on the next start, with a warning naming the file.
  torn_at = [i for i, p in enumerate(points) if p[0] == "metrics_write"][0]
  warned = logs[torn_at + 1].read_text()
  assert f"{cut / 'metrics.jsonl'}: dropping its last line, torn" in warned

  want_rows, got_rows = _rows(ref), _rows(cut)
  assert [r["step"] for r in got_rows] == list(range(STEPS))
  assert got_rows == want_rows, f"kill points {points}"
  assert all(f"{n}/eval/average" in got_rows[s] for n in NAMES for s in (1, 2))
  assert all(r["data/too_long"] == 1 for r in got_rows)
  assert _log_digests(cut) == _log_digests(ref), f"kill points {points}"
  want = np.load(ref / "final_params.npz")
  got = np.load(cut / "final_params.npz")
  assert sorted(want.files) == sorted(got.files)
  for key in want.files:
    np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key}; kill points {points}")
  assert not list((cut / "checkpoints").glob("*orbax-checkpoint-tmp*"))


def test_fault_points_cover_every_phase_in_run_order():
  for seed in range(20):
    points = fault_points(seed)
    kills = [p for p in points if not p[0].startswith("full:")]
    assert sorted(p[0] for p in kills) == sorted(PHASES) and len(points) == 6
    key = lambda p: (p[1], PHASES.index(p[0].removeprefix("full:")))
    assert [key(p) for p in points] == sorted(key(p) for p in points)
    assert all(p[1] < STEPS and (p[2] == 0 or p[1] < STEPS - 1) for p in points)
