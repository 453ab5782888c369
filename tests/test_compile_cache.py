"""compile_cache: the machine tag, and a program compiled by one process loaded by the next."""

import ast
import json
import os
import subprocess
import sys
import textwrap

import jax

from graft_jax import compile_cache

CPUINFO = textwrap.dedent("""\
    vendor_id\t: GenuineIntel
    cpu family\t: 6
    model\t\t: 207
    model name\t: Intel(R) Xeon(R)
    stepping\t: 2
    flags\t\t: fpu sse avx2 avx512f
    """)


def test_machine_tag_follows_processor_features_and_xla_flags(monkeypatch):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  tag = compile_cache.machine_tag(CPUINFO)
  assert len(tag) == 16 and int(tag, 16) >= 0
  assert compile_cache.machine_tag(CPUINFO) == tag
  # The same flags in another order are the same machine.
  assert compile_cache.machine_tag(CPUINFO.replace("avx2 avx512f", "avx512f avx2")) == tag
  assert compile_cache.machine_tag(CPUINFO.replace(" avx512f", "")) != tag  # no AVX-512
  assert compile_cache.machine_tag(CPUINFO.replace("207", "143")) != tag
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
  assert compile_cache.machine_tag(CPUINFO) != tag


def test_empty_or_unusable_folder_leaves_the_cache_off(tmp_path, caplog):
  before = jax.config.jax_compilation_cache_dir
  assert compile_cache.enable("") is None
  blocker = tmp_path / "a_file"
  blocker.write_text("")
  assert compile_cache.enable(str(blocker / "cache")) is None
  assert jax.config.jax_compilation_cache_dir == before
  assert "not usable" in caplog.text and str(blocker) in caplog.text


CHILD = textwrap.dedent("""\
    import json, sys
    import jax, jax.numpy as jnp
    from jax import monitoring
    from graft_jax import compile_cache
    jax.jit(jnp.cos)(1.0)  # compiled before the cache is on: not written
    hits = []
    monitoring.register_event_listener(
        lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
    folder = compile_cache.enable(sys.argv[1], min_compile_seconds=0)
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(axis=0) * 3.0 + 1.0)
    out = f(jnp.arange(64.0, dtype=jnp.float32).reshape(8, 8) / 64)
    # A second folder takes the programs compiled after it is enabled.
    other = compile_cache.enable(sys.argv[2], min_compile_seconds=0)
    jax.jit(lambda x: jnp.sinh(x) - 2.0)(out)
    print(json.dumps({"folders": [str(folder), str(other)], "hits": len(hits),
                      "out": out.tolist()}))
    """)


def _entries(folder) -> set:
  return {e.name for e in os.scandir(folder) if e.name.endswith("-cache")}


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
  script = tmp_path / "child.py"
  script.write_text(CHILD)
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  argv = [sys.executable, str(script), str(tmp_path / "a"), str(tmp_path / "b")]
  run = lambda: json.loads(subprocess.run(argv, check=True, capture_output=True, text=True,
                                          env=env).stdout.splitlines()[-1])
  first = run()
  tag = compile_cache.machine_tag()
  assert first["folders"] == [str(tmp_path / "a" / tag), str(tmp_path / "b" / tag)]
  # Each folder holds the programs compiled while it was enabled, none from before.
  in_a, in_b = (_entries(f) for f in first["folders"])
  assert in_a and in_b and not in_a & in_b
  assert not any("cos" in name for name in in_a | in_b)
  second = run()
  assert first["hits"] == 0 and second["hits"] >= 1
  assert second["out"] == first["out"]


def test_imports_of_graft_jax_are_the_host_fingerprint_alone():
  # The cache sits below every package that enables it (train, toy, experiments, launch).
  tree = ast.parse(open(compile_cache.__file__, encoding="utf-8").read())
  names = {f"{n.module}.{a.name}" if isinstance(n, ast.ImportFrom) else a.name
           for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
           for a in n.names}
  assert {n for n in names if n.startswith("graft_jax")} == {"graft_jax.host_fingerprint"}
