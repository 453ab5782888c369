"""`VLLMEngine`: a `RolloutEngine` backed by a vLLM sidecar, with weight sync and restarts.

Log-prob convention (the same as `JaxSamplerEngine`): `logp_BxL` is `log_softmax(logits /
T)` of the sampled token, `log_softmax(logits)` when greedy (T = 0). The server runs with
`--logprobs-mode processed_logprobs`, which gives exactly that when top-k and top-p are
off (the training default); with them on, vLLM reports the log-prob under the filtered,
renormalised distribution instead (the tokens are still correct).

After a stop signal (``preemption.stopped_since``), or once closed, no server is started or
restarted: a sampling call in flight fails at once (its step is abandoned) and a weight sync
that finds its server gone is skipped and reported as ``sync_failure``, so the trainer saves
the step it completed and stops; the servers start from the checkpoint's weights on resume.

Weights staged in /dev/shm go to a folder of an unpredictable name, mode 0700, created
here (one planted by another user is refused), removed by ``close`` or, when the trainer
dies, by the server's watchdog.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import logging
import os
import pathlib
import secrets
import shutil
import stat
import threading
import time
import weakref
from typing import Sequence

import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax import distributed
from graft_jax.rollout import vllm_sync, weight_transfer
from graft_jax.rollout.types import RolloutBatch, SamplingParams, check_generate_args
from graft_jax.rollout.vllm_sidecar import (SidecarDown, SidecarError, SidecarOptions,
                                            SidecarStopped, VLLMSidecar)

log = logging.getLogger(__name__)
_TMPFS = pathlib.Path("/dev/shm")


class WeightSyncError(RuntimeError):
  """vLLM's log-probs of the probe disagree with the JAX model's."""


_PROBE_KEYS = ("vllm_probe_mean_abs", "vllm_probe_max_abs")


def _probe_from_writer(gap: dict[str, float]) -> dict[str, float]:
  """Process 0's probe gap on every process (the others pass ``{}``)."""
  values = np.array([gap.get(k, 0.0) for k in _PROBE_KEYS], np.float64)
  got = distributed.from_writer({"gap": values})["gap"]
  return {k: float(v) for k, v in zip(_PROBE_KEYS, got)}


def default_weights_dir(run_dir) -> pathlib.Path:
  """A new tmpfs folder name nobody can guess when /dev/shm is writable, else
  `run_dir/weights`; the engine creates it (`private_dir`).

  Random, not keyed by `run_dir`: another user could plant a folder (or a link) at a
  name known in advance. A killed trainer's folder is removed by its servers' watchdog.
  """
  run_dir = pathlib.Path(run_dir).resolve()
  if _TMPFS.is_dir() and os.access(_TMPFS, os.W_OK):
    return _TMPFS / f"graft_jax-vllm-{secrets.token_hex(8)}"
  return run_dir / "weights"


def private_dir(folder: pathlib.Path) -> pathlib.Path:
  """``folder``, created mode 0700 when missing; one that is a link, or another user's,
  is refused, as its files could be read or replaced by someone else."""
  folder.parent.mkdir(parents=True, exist_ok=True)
  try:
    os.mkdir(folder, 0o700)
  except FileExistsError:
    pass
  st = os.lstat(folder)
  if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
    raise SidecarError(f"{folder} is not a folder of this user's (a link, or planted by "
                       f"another user); the staged weights are not written there")
  os.chmod(folder, 0o700)
  return folder


def _request_seeds(seed: int, num: int, n: int, first: int = 0) -> list[int]:
  # vLLM seeds sample j of a request with seed + j; spacing requests by n keeps
  # every (prompt, sample) stream distinct within a call. ``first``: the first
  # request's index in the call.
  base = int.from_bytes(hashlib.sha256(str(seed).encode()).digest()[:4], "little") >> 1
  return [base + i * n for i in range(first, first + num)]


def _link_weights(run_dir: pathlib.Path, weights_dir: pathlib.Path) -> None:
  """`run_dir/weights` points at tmpfs weights, so the run folder shows where they are."""
  link = run_dir / "weights"
  if link.resolve() == weights_dir:
    return
  run_dir.mkdir(parents=True, exist_ok=True)
  if link.is_symlink():
    link.unlink()
  if not link.exists():
    link.symlink_to(weights_dir, target_is_directory=True)


def _shut_down(sidecar, weights_dir: pathlib.Path) -> None:
  sidecar.stop()
  if _TMPFS in weights_dir.parents:
    shutil.rmtree(weights_dir, ignore_errors=True)


class VLLMEngine:
  """Samples with a vLLM server that serves the current weights of a graft_jax decoder.

  Args:
    model: the decoder; its weights are written to `weights_dir` and served.
    eos_ids: token id(s) that end a response (vLLM's own EOS is ignored).
    pad_id: id written after a response ends.
    run_dir: the sidecar's folder (server.log, caches).
    options: how to launch the server.
    name: the served model name (and the log prefix).
    weights_dir: where safetensors are written (default: `default_weights_dir`).
    check_every: run the probe check on sync 1 and every `check_every` syncs
      (and after every start); 0 checks only after starts.
    probe_tolerance: largest mean |vLLM - JAX| probe log-prob gap accepted;
      default 1e-3 when both sides compute in float32, else 0.25.
    max_restarts: restarts per call before giving up.
    request_timeout_s: limit for one HTTP request.
    health_every_s: while waiting, poll /health this often; 3 misses = a hung server.
    max_concurrency: parallel HTTP requests (one per prompt); 0 sends every prompt of a
      call at once (a cap holds prompts back while the server has room).
    weight_sync: 'reload' (safetensors + reload_weights), or on CUDA GPUs 'nccl' / 'ipc'
      (vLLM's weight-transfer API, `graft_jax.rollout.weight_transfer`); a push backend
      serves a model that ties its embeddings from a tied checkpoint (one embedding per
      push); every trainer process joins a push's gathers, process 0 sends.
    sync_timeout_s: the longest an NCCL push may take (`weight_transfer.deadline`). A
      push aborted at it leaves the server on older weights: `sync_failure` holds the
      error, `generate` refuses to sample, and the trainer saves the step and stops.
    start_after: engines whose servers share this one's GPU: it launches at its first
      call, once they answer /health (`_launch_in_turn`).
  """

  # Sampling runs in the server's process, off the trainer's devices, so several
  # engines can sample at once (`graft_jax.train.collect.collect_all`).
  out_of_process = True

  def __init__(self, model, *, eos_ids: int | Sequence[int], pad_id: int, run_dir,
               options: SidecarOptions = SidecarOptions(), name: str = "policy",
               weights_dir=None, check_every: int = 10, probe_tolerance: float | None = None,
               max_restarts: int = 2, request_timeout_s: float = 3600.0,
               health_every_s: float = 10.0, max_concurrency: int = 0,
               weight_sync: str = "reload", sync_timeout_s: float = 120.0,
               start_after: Sequence[VLLMEngine] = ()):
    self.eos_ids = tuple(int(e) for e in np.atleast_1d(eos_ids))
    if not self.eos_ids:
      raise ValueError("VLLMEngine needs at least one EOS id")
    self.pad_id = int(pad_id)
    self.weight_sync, self._pusher = weight_sync, None
    self.sync_timeout_s = sync_timeout_s
    self.sync_failure: weight_transfer.SyncAborted | None = None
    if weight_sync != "reload":  # the server opens its side of the transfer at launch
      options = dataclasses.replace(
          options, extra_args=options.extra_args + weight_transfer.server_args(weight_sync),
          env=options.env + weight_transfer.server_env(weight_sync, tcp=bool(options.host)))
    self.options = options
    self._serves = distributed.is_writer()  # under several processes, process 0 serves
    self.weights_dir = pathlib.Path(weights_dir or default_weights_dir(run_dir)).resolve()
    if self._serves:
      private_dir(self.weights_dir)
    self.check_every = check_every
    full = options.dtype == "float32" and model.dtype == jnp.float32
    self.probe_tolerance = probe_tolerance if probe_tolerance is not None else (
        1e-3 if full else 0.25)
    self.max_restarts = max_restarts
    self.request_timeout_s = request_timeout_s
    self.health_every_s = health_every_s
    self.max_concurrency = max_concurrency
    self.graphdef, _ = nnx.split(model)
    self._model = model
    self._probe_ids = vllm_sync.probe_ids(model.cfg.vocab_size, length=min(
        32, options.max_model_len - 2 if options.max_model_len else 32))
    self.syncs = 0
    self.restarts = 0
    self.last_probe: dict[str, float] = {}
    self._served = False  # a call has succeeded once
    self.last_sync_metrics: dict[str, float] = {}
    self._warned_filters = False
    self._name = name
    # Several trainer processes: process 0 runs and talks to the server; every process
    # takes part in the weight gathers and JAX forwards, and receives process 0's results.
    self._multi = distributed.multi_process()
    self._expected_probe = None  # the JAX side of the probe for the weights now served
    vllm_sync.write_weights(model, self.weights_dir, options.dtype,
                            untie=weight_sync == "reload")
    if self._multi:
      self._expected_probe = vllm_sync.jax_probe_logprobs(model, self._probe_ids)
    self.sidecar, self._cleanup, self._closed = None, lambda: None, False
    # started_after_ready: whether each of start_after answered /health at this one's launch.
    self._start_after, self.started_after_ready = tuple(start_after), None
    self._turn = threading.Lock()
    if self._serves:
      _link_weights(pathlib.Path(run_dir), self.weights_dir)
      self.sidecar = VLLMSidecar(self.weights_dir, run_dir, options, name=name)
      if _TMPFS in self.weights_dir.parents:  # its watchdog removes them if we die
        self.sidecar.cleanup_dirs = (self.weights_dir,)
      # Also runs at interpreter exit, for engines nobody closed.
      self._cleanup = weakref.finalize(self, _shut_down, self.sidecar, self.weights_dir)
      if not self._start_after:
        self.sidecar.start()  # boots while the caller does other work

  @property
  def name(self) -> str:
    return self.sidecar.name if self.sidecar is not None else self._name

  # -- weights -----------------------------------------------------------------

  def set_weights(self, model) -> None:
    """Serves `model`'s weights (an nnx decoder or its `nnx.State`) from now on.

    Records `last_sync_metrics`: write and reload seconds, restarts so far,
    and the probe gap when the check ran. Under several trainer processes every
    process calls it (the weights are gathered from all of them) and process 0
    writes and reloads.

    After a stop signal, a server found gone is not restarted: the sync is skipped and
    ``sync_failure`` set, as for an aborted push, so the trainer saves the completed
    step and stops (module docstring).
    """
    if isinstance(model, nnx.Module):
      self.graphdef, _ = nnx.split(model)
    else:
      model = nnx.merge(self.graphdef, model)
    self._model = model
    self._expected_probe = None
    self.sync_failure = None
    try:
      self._sync(model)
    except SidecarStopped as e:
      self.sync_failure = e
      log.warning("%s", e)
      self.last_sync_metrics = {"vllm_sync_aborted": 1.0, "vllm_restarts": self.restarts}

  def _sync(self, model) -> None:
    """`set_weights`' transfer and check."""
    if self.weight_sync == "reload":
      t0 = time.perf_counter()
      vllm_sync.write_weights(model, self.weights_dir, self.options.dtype)
      if self._multi:  # a collective forward, so a restart's probe on process 0 needs none
        self._expected_probe = vllm_sync.jax_probe_logprobs(model, self._probe_ids)
      t1 = time.perf_counter()
      if self._serves:
        self._with_restarts(lambda: vllm_sync.reload_weights(
            self.sidecar, self.weights_dir, timeout=self.request_timeout_s))
      metrics = {"vllm_write_s": t1 - t0, "vllm_reload_s": time.perf_counter() - t1}
    else:
      # The server started tied: the embedding is sent once.
      deadline = {"sync_timeout_s": self.sync_timeout_s} if self.weight_sync == "nccl" else {}
      self._pusher = self._pusher or weight_transfer.make_sender(
          self.weight_sync, self.sidecar, dtype=self.options.dtype,
          timeout=self.request_timeout_s, **deadline)
      push = lambda: self._pusher.send(model, self.syncs + 1)
      try:
        pushed = self._with_restarts(push) if self._serves else push()
      except weight_transfer.SyncAborted as e:
        self.sync_failure, pushed = e, None
      if self._aborted_anywhere():
        log.error("%s", self.sync_failure)
        self.last_sync_metrics = {"vllm_sync_aborted": 1.0, "vllm_restarts": self.restarts}
        return
      if self._multi:  # a collective forward, like reload's
        self._expected_probe = vllm_sync.jax_probe_logprobs(model, self._probe_ids)
      metrics = {"vllm_push_s": pushed["seconds"], "vllm_push_bytes": pushed["bytes"]}
    self.syncs += 1
    if self.syncs == 1 or (self.check_every and self.syncs % self.check_every == 0):
      if self._multi:  # process 0 measures the gap; every process gets it and checks it
        gap = self._with_restarts(self._probe_gap) if self._serves else {}
        self.last_probe = _probe_from_writer(gap)
        metrics.update(self._check_probe(self.last_probe))
      else:
        metrics.update(self._with_restarts(self._probe))
    metrics["vllm_restarts"] = self.restarts
    self.last_sync_metrics = metrics

  def _aborted_anywhere(self) -> bool:
    """Whether the push was aborted; under several processes, whether process 0's was
    (only it sends), told to all so they skip the probe's collective forward together."""
    if self._multi:
      flag = np.array([self.sync_failure is not None], bool)
      if distributed.from_writer({"aborted": flag})["aborted"][0] and self.sync_failure is None:
        self.sync_failure = weight_transfer.SyncAborted(
            f"{self.name}: process 0's weight push was aborted")
    return self.sync_failure is not None

  def _probe(self) -> dict[str, float]:
    return self._check_probe(self._probe_gap())

  def _probe_gap(self) -> dict[str, float]:
    """|vLLM - JAX| log-probs of the probe tokens under the weights now served."""
    if self._expected_probe is None:
      self._expected_probe = vllm_sync.jax_probe_logprobs(self._model, self._probe_ids)
    mean, worst = vllm_sync.probe_gap(self.sidecar, self._expected_probe, self._probe_ids,
                                      timeout=self.request_timeout_s)
    self.last_probe = {"vllm_probe_mean_abs": mean, "vllm_probe_max_abs": worst}
    return self.last_probe

  def _check_probe(self, gap: dict[str, float]) -> dict[str, float]:
    mean, worst = gap["vllm_probe_mean_abs"], gap["vllm_probe_max_abs"]
    if not mean <= self.probe_tolerance:
      raise WeightSyncError(
          f"{self.name}: vLLM and JAX disagree on the probe's log-probs (mean |gap| "
          f"{mean:.3g}, max {worst:.3g} > tolerance {self.probe_tolerance:g}); the served "
          f"weights are not the trainer's (weights in {self.weights_dir})")
    return gap

  # -- sampling ----------------------------------------------------------------

  def generate(self, prompts: Sequence[Sequence[int]], n: int,
               params: SamplingParams, *, prompt_offset: int = 0) -> RolloutBatch:
    """Samples `n` responses per token-id prompt; see `RolloutBatch` for the fields.

    ``prompt_offset``: the first prompt's index in a larger call split over replicas
    (`vllm_replicas`), whose request seeds it takes."""
    check_generate_args(prompts, n)
    if self.sync_failure is not None:  # the server holds older weights than the trainer
      raise self.sync_failure
    if (params.top_k or params.top_p < 1.0) and params.temperature and not self._warned_filters:
      self._warned_filters = True
      log.warning("%s: top-k/top-p on: vLLM reports log-probs of the filtered distribution, "
                  "not log_softmax(logits / T)", self.name)
    # vLLM refuses n > 1 when greedy; the n rows would be identical anyway.
    asked = 1 if params.temperature == 0 else n
    seeds = _request_seeds(params.seed, len(prompts), asked, first=prompt_offset)
    bodies = [self._body(p, asked, params, s) for p, s in zip(prompts, seeds)]
    outs = self._with_restarts(lambda: self._post_all(bodies)) if self._serves else None
    if not self._multi:
      return self._to_batch(outs, n, params.max_new_tokens)
    # Several processes: process 0's batch, sent to the others (same shapes everywhere).
    mine = (self._to_batch(outs, n, params.max_new_tokens) if self._serves
            else self._to_batch([{"choices": []}] * len(prompts), n, params.max_new_tokens,
                                check=False))
    fields = {f.name: getattr(mine, f.name) for f in dataclasses.fields(mine)
              if f.name not in ("n", "engine_metrics")}  # arrays only; vLLM measures none
    return RolloutBatch(**distributed.from_writer(fields), n=n)

  def _body(self, prompt, n: int, params: SamplingParams, seed: int) -> dict:
    return {
        "model": self.name, "prompt": [int(t) for t in prompt], "n": n,
        "max_tokens": params.max_new_tokens, "temperature": params.temperature,
        "top_p": params.top_p, "top_k": params.top_k, "seed": seed,
        "logprobs": 0, "return_token_ids": True, "return_tokens_as_token_ids": True,
        # Stop on our EOS ids only, whatever the checkpoint's config says
        # (a negative id, which never matches, turns EOS off as in the JAX engine).
        "stop_token_ids": [e for e in self.eos_ids if e >= 0], "ignore_eos": True,
    }

  def _post_all(self, bodies: list[dict]) -> list[dict]:
    """One request per prompt, in parallel; watches the server while they run."""
    sidecar = self.sidecar
    pool = cf.ThreadPoolExecutor(max_workers=min(len(bodies), self.max_concurrency or len(bodies)))
    try:
      futures = [pool.submit(sidecar.post, "/v1/completions", b, timeout=self.request_timeout_s)
                 for b in bodies]
      misses = 0
      while True:
        done, pending = cf.wait(futures, timeout=self.health_every_s,
                                return_when=cf.FIRST_EXCEPTION)
        for f in done:
          if f.exception() is not None:
            raise f.exception()
        if not pending:
          return [f.result() for f in futures]
        if not sidecar.alive():
          raise SidecarDown(f"{self.name}: vLLM process exited mid-request")
        misses = 0 if sidecar.healthy(timeout=self.health_every_s) else misses + 1
        if misses >= 3:
          raise SidecarDown(f"{self.name}: vLLM stopped answering /health")
    except KeyboardInterrupt:
      # The request threads would hold the interpreter's exit until vLLM answered.
      sidecar.stop()
      raise
    finally:
      pool.shutdown(wait=False, cancel_futures=True)

  def _to_batch(self, outs: list[dict], n: int, steps: int, check: bool = True) -> RolloutBatch:
    """The responses as padded arrays; ``check=False`` allows prompts without choices
    (a follower process's placeholder, filled from process 0)."""
    rows = len(outs) * n
    tokens = np.full((rows, steps), self.pad_id, np.int32)
    logp = np.zeros((rows, steps), np.float32)
    mask = np.zeros((rows, steps), bool)
    finished = np.zeros(rows, bool)
    for i, out in enumerate(outs):
      choices = sorted(out["choices"], key=lambda c: c["index"])
      if len(choices) == 1:
        choices = choices * n
      if len(choices) != n and check:
        raise SidecarError(f"{self.name}: asked for {n} samples, got {len(choices)}")
      for j, c in enumerate(choices):
        b, ids = i * n + j, c["token_ids"]
        k = len(ids)
        tokens[b, :k] = ids
        logp[b, :k] = c["logprobs"]["token_logprobs"]
        mask[b, :k] = True
        finished[b] = k > 0 and ids[-1] in self.eos_ids
    return RolloutBatch(tokens_BxL=tokens, mask_BxL=mask, logp_BxL=logp, finished_B=finished,
                        truncated_B=~finished,
                        prompt_index_B=np.repeat(np.arange(len(outs), dtype=np.int32), n), n=n)

  # -- recovery and shutdown -----------------------------------------------------

  def _with_restarts(self, fn):
    """Runs `fn` on a ready server; on `SidecarDown`, restarts (current weights) and retries.
    After a stop signal, a server down or not yet started raises `SidecarStopped`."""
    failures = 0
    while True:
      try:
        if not self.sidecar.ready:
          self._unless_stopping(None)
          if self._start_after:
            self._launch_in_turn()
          self.sidecar.wait_ready()
          self._restore_weights()
          self._probe()  # a fresh server must serve the trainer's weights
        result = fn()
        self._served = True
        return result
      except SidecarDown as e:
        self._unless_stopping(e)
        failures += 1
        if not self._served:
          # Dying on its first request is a model/config problem (e.g. a head_dim
          # the attention backend lacks); a restart would only die again.
          tail = self.sidecar.log_tail()
          self.sidecar.stop()
          raise SidecarError(f"{self.name}: vLLM died before serving a request: {e}\n"
                             f"log {self.sidecar.log_path}:\n{tail}") from e
        if failures > self.max_restarts:
          tail = self.sidecar.log_tail()
          self.sidecar.stop()
          raise SidecarError(
              f"{self.name}: vLLM failed {failures} times in one call, giving up "
              f"(max_restarts={self.max_restarts}); last error: {e}\n"
              f"log {self.sidecar.log_path}:\n{tail}") from e
        self.restarts += 1
        log.warning("%s: %s; restarting vLLM (restart %d)", self.name, e, self.restarts)
        self.sidecar.stop()
        self.sidecar.start()

  def _launch_in_turn(self) -> None:
    """Launches this engine's server, if never launched, once every server in ``start_after``
    (each in its own turn) answers /health (why: `graft_jax.rollout.vllm_setup`)."""
    with self._turn:
      if self.sidecar.starts:
        return
      for earlier in self._start_after:
        s = earlier.sidecar
        if s is not None and not earlier._closed:
          earlier._launch_in_turn()
          until = time.monotonic() + s.options.startup_timeout_s  # then its own call fails
          while s.starts == 1 and s.alive() and not s.healthy(2.0) and time.monotonic() < until:
            time.sleep(0.5)
      self.started_after_ready = {e.name: bool(e.sidecar and e.sidecar.healthy())
                                  for e in self._start_after}
      self.sidecar.start()

  def _unless_stopping(self, error: Exception | None) -> None:
    """Raises `SidecarStopped` (from ``error``) once the run got a stop signal or the
    engine was closed (a sampling thread the trainer no longer waits for)."""
    if self._closed or self.sidecar.stopping():
      raise SidecarStopped(f"{self.name}: the run is stopping; vLLM is not (re)started"
                           + (f" ({error})" if error else "")) from error

  def _restore_weights(self) -> None:
    """A (re)started server loads ``weights_dir``. Under ``reload`` every sync rewrites
    it, so that is the trainer's weights; under a push backend it holds the first
    weights only, so once pushing has begun the trainer's weights are pushed again
    (the sender sees a new server and opens its transfer first)."""
    if self.weight_sync != "reload" and self._pusher is not None:
      if self._multi:  # the push gathers from every process, which are elsewhere now
        raise SidecarError(f"{self.name}: vLLM restarted after pushes began; under several "
                           f"trainer processes only a collective push restores it: resume "
                           f"the run, or use vllm.weight_sync=reload, which restarts alone")
      self._pusher.send(self._model, self.syncs)

  def close(self) -> None:
    """Stops the server and removes tmpfs weights; idempotent."""
    self._closed = True
    self._cleanup()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
