"""The verifier never hangs: slow sympy times out, scores 0, pool survives."""

import os
import signal

import numpy as np

from graft_jax import rewards

# 9^(9^(9^9)) makes sympy try to evaluate an astronomically large power.
PATHOLOGICAL = "\\boxed{9^{9^{9^{9}}}}"


def _batch():
  responses = ["\\boxed{\\sqrt{8}}", PATHOLOGICAL, "\\boxed{1+x}",
               "\\boxed{0.25}", "\\boxed{(1,2]}"]
  golds = ["2\\sqrt{2}", "1", "x+1", "\\frac{1}{4}", "(1, 2]"]
  return responses, golds, [1.0, 0.0, 1.0, 1.0, 1.0]


def test_soft_timeout_scores_zero_and_keeps_the_batch(pool):
  responses, golds, want = _batch()
  got, stats = rewards.score(responses, golds, pool=pool, timeout_s=2.0)
  np.testing.assert_array_equal(got, want)
  assert stats.timeouts == 1
  got, stats = rewards.score(["\\boxed{\\sqrt{4}}"], ["2.0"], pool=pool)
  assert got[0] == 1.0 and stats.timeouts == 0


def test_hung_worker_is_killed_and_replaced():
  # Without the in-worker timer the worker really hangs inside sympy, so only
  # the parent's hard deadline can save the batch.
  with rewards.VerifierPool(2, soft_timeout=False, hard_grace_s=0.5) as pool:
    pids_before = set(pool.worker_pids)
    responses, golds, want = _batch()
    got, stats = rewards.score(responses, golds, pool=pool, timeout_s=2.0)
    np.testing.assert_array_equal(got, want)
    assert stats.timeouts == 1 and stats.hard_timeouts == 1
    assert stats.worker_restarts == 1
    assert len(pids_before - set(pool.worker_pids)) == 1
    got, stats = rewards.score(["\\boxed{x^2}"] * 4, ["x^2"] * 4, pool=pool,
                               timeout_s=5.0)
    np.testing.assert_array_equal(got, np.ones(4))


def test_dead_worker_is_replaced(pool):
  os.kill(pool.worker_pids[0], signal.SIGKILL)
  got, stats = rewards.score(["\\boxed{\\frac{6}{8}}", "\\boxed{2^{10}}"],
                             ["0.75", "1024"], pool=pool)
  np.testing.assert_array_equal(got, [1.0, 1.0])
  assert stats.worker_restarts >= 1


def test_close_stops_workers():
  pool = rewards.VerifierPool(1)
  got, _ = rewards.score(["\\boxed{\\sqrt{9}}"], ["3"], pool=pool)
  assert got[0] == 1.0
  procs = [w.proc for w in pool._workers]  # pylint: disable=protected-access
  pool.close()
  assert not any(p.is_alive() for p in procs)


class _BrokenPipe:
  """Wraps a worker's Connection so that the next send fails."""

  def __init__(self, conn):
    self._conn = conn

  def send(self, msg):
    del msg
    raise BrokenPipeError("simulated")

  def __getattr__(self, name):
    return getattr(self._conn, name)


def test_failed_send_requeues_the_chunk(pool):
  # Break every worker's pipe: whichever one the chunk is sent to fails the send.
  for w in pool._workers:  # pylint: disable=protected-access
    w.conn = _BrokenPipe(w.conn)
  responses = [f"\\boxed{{\\sqrt{{{i * i}}}}}" for i in range(2, 10)]
  got, stats = rewards.score(responses, [str(i) for i in range(2, 10)], pool=pool)
  np.testing.assert_array_equal(got, np.ones(8))
  assert stats.worker_restarts >= 1 and stats.errors == 0


def test_stop_signals_to_every_process_leave_the_pool_whole():
  """A scheduler's SIGTERM / SIGUSR1 reach every process of a job step: the workers and
  the fork server ignore them (the trainer stops the pool once its step is done), so the
  batch scores normally and a worker can still be replaced afterwards."""
  from multiprocessing import forkserver
  with rewards.VerifierPool(2, chunk_size=1) as pool:
    pids = list(pool.worker_pids)
    server = forkserver._forkserver._forkserver_pid  # pylint: disable=protected-access
    for pid in [*pids, server]:
      for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        os.kill(pid, signum)
    responses, golds = ["\\boxed{\\frac{6}{8}}", "\\boxed{2^{10}}", "\\boxed{7}"], ["0.75", "1024", "8"]
    got, stats = rewards.score(responses, golds, pool=pool)
    np.testing.assert_array_equal(got, [1.0, 1.0, 0.0])
    assert stats.worker_restarts == 0 and stats.errors == 0
    assert list(pool.worker_pids) == pids
    os.kill(pids[0], signal.SIGKILL)  # the fork server is alive to replace it
    # Items only sympy settles (no fast path, none cached), one per chunk: both workers get some.
    roots = [f"\\boxed{{\\sqrt{{{k * k}}}}}" for k in range(11, 17)]
    got, stats = rewards.score(roots, [str(k) for k in range(11, 17)], pool=pool)
    np.testing.assert_array_equal(got, np.ones(6))
    assert stats.worker_restarts >= 1 and pids[0] not in pool.worker_pids


EXITING_CHILD = '''
import multiprocessing as mp
import sys

KEPT = []

def score_and_return():  # leaves its pool open and alive, as a job's worker process may
    from graft_jax import rewards
    pool = rewards.VerifierPool(2)
    KEPT.append(pool)
    got, _ = rewards.score(["\\\\boxed{\\\\sqrt{9}}"], ["3"], pool=pool)
    assert got[0] == 1.0

if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    child = mp.get_context("spawn").Process(target=score_and_return)
    child.start()
    child.join(120)
    print("exitcode", child.exitcode)
    if child.exitcode is None:
        child.kill()
'''


def test_a_process_that_leaves_its_pool_open_still_exits(tmp_path):
  """multiprocessing ends a process it started by terminating and joining its children;
  the workers ignore SIGTERM, so the pool must close itself before that join."""
  import pathlib
  import subprocess
  import sys
  script = tmp_path / "exiting_child.py"
  script.write_text(EXITING_CHILD)
  root = pathlib.Path(__file__).resolve().parents[2]
  out = subprocess.run([sys.executable, str(script), str(root)], capture_output=True,
                       text=True, timeout=300, cwd=root)
  assert out.stdout.strip().splitlines()[-1:] == ["exitcode 0"], out.stdout + out.stderr[-2000:]
