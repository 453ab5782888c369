"""The weight push's deadline on a CPU: a peer that never comes ends the wait in time, aborted.

The NCCL calls themselves need a GPU (``benchmarks/gpu_check.py --sections=nccl_local``);
here the thing waited on is a thread stuck in a blocking call that never returns
(`NeverReturns`, a test double for the deadline alone), released only by the abort,
as ``ncclCommAbort`` releases a non-blocking communicator's calls.
"""

import concurrent.futures
import ctypes
import signal
import threading
import time

import pytest

from graft_jax.rollout.vllm_sidecar import SidecarDown
from graft_jax.rollout.weight_transfer import SyncAborted, deadline, nccl
from graft_jax import preemption

LIMIT_S = 0.5


class NeverReturns:
  """A thread blocked in a call that returns only once `abort` is called."""

  def __init__(self):
    self.aborts = 0
    self._release = threading.Event()
    self._thread = threading.Thread(target=self._release.wait, daemon=True)
    self._thread.start()

  def done(self) -> bool:
    return not self._thread.is_alive()

  def abort(self) -> None:
    self.aborts += 1
    self._release.set()


def test_a_peer_that_never_joins_ends_within_the_deadline_with_one_line():
  call = NeverReturns()
  t0 = time.monotonic()
  with pytest.raises(SyncAborted) as stalled:
    deadline.Deadline(LIMIT_S, "toy_a: NCCL weight push").wait(
        call.done, step="joining the server's group", abort=call.abort)
  waited = time.monotonic() - t0
  assert LIMIT_S <= waited < LIMIT_S + 5.0  # the deadline, plus a loaded machine's slack
  assert str(stalled.value) == (
      "toy_a: NCCL weight push: joining the server's group did not finish within 0.5 s "
      "(vllm.sync_timeout_s: the server never joined or stalled); the transfer was aborted")
  assert call.aborts == 1
  call._thread.join(timeout=5.0)
  assert call.done()  # the abort released the blocked call


def test_a_server_that_fails_aborts_at_once_and_raises_its_own_error():
  call = NeverReturns()
  peer = concurrent.futures.Future()
  died = SidecarDown("toy_a: vLLM process exited mid-request")
  threading.Timer(0.05, peer.set_exception, (died,)).start()
  with pytest.raises(SidecarDown) as raised:
    deadline.Deadline(60.0, "toy_a: NCCL weight push").wait(
        call.done, step="bucket 1 of 3", abort=call.abort, peer=peer)
  assert raised.value is died  # the engine restarts a server that died, as for any request
  assert call.aborts == 1


def test_an_nccl_error_aborts_with_one_line():
  aborts = []

  def failing():
    raise RuntimeError("NCCL the communicator failed: remote process exited or there was "
                       "a network error")
  with pytest.raises(SyncAborted, match=r"^toy_b: NCCL weight push: bucket 2 of 2 failed "
                     r"\(NCCL the communicator failed: remote process exited"):
    deadline.Deadline(60.0, "toy_b: NCCL weight push").wait(
        failing, step="bucket 2 of 2", abort=lambda: aborts.append(1))
  assert aborts == [1]


def test_a_call_that_finishes_is_not_aborted():
  calls = iter([False, False, True])
  aborts = []
  deadline.Deadline(60.0, "toy_a").wait(lambda: next(calls), step="s",
                                        abort=lambda: aborts.append(1))
  assert aborts == []


def test_a_stop_signal_during_a_stalled_wait_is_seen_and_the_wait_still_ends():
  """The waiting thread runs Python between polls, so the stop handler runs at once (a
  blocking C call would hold it until the call returned, that is never)."""
  call = NeverReturns()
  with preemption.StopSignals() as stop:
    threading.Timer(0.1, signal.raise_signal, (signal.SIGTERM,)).start()
    with pytest.raises(SyncAborted):
      deadline.Deadline(LIMIT_S, "toy_a").wait(call.done, step="s", abort=call.abort)
    assert stop.signum == signal.SIGTERM


def test_the_nonblocking_config_has_ncclconfig_t_layout():
  """``ncclConfig_t`` of nccl.h (2.17 and later begin so): size_t size; unsigned magic,
  version; int blocking, cgaClusterSize, minCTAs, maxCTAs; const char *netName; int
  splitShare. Offsets on LP64, by hand: 0, 8, 12, 16, 20, 24, 28, 32, 40; 48 bytes."""
  offsets = {name: getattr(nccl._Config, name).offset for name, _ in nccl._Config._fields_}
  assert offsets == {"size": 0, "magic": 8, "version": 12, "blocking": 16,
                     "cgaClusterSize": 20, "minCTAs": 24, "maxCTAs": 28, "netName": 32,
                     "splitShare": 40}
  config = nccl.nonblocking_config()
  assert config.size == ctypes.sizeof(nccl._Config) == 48
  assert (config.magic, config.version, config.blocking) == (0xcafebeef, 21700, 0)
  assert config.minCTAs == config.splitShare == -2 ** 31 and config.netName is None
