"""Suite-wide pytest set-up: the hypothesis profile (reproducible on CI, random locally),
and the groups that `make test`'s two pytest-xdist workers share out.

With the `CI` environment variable set (to anything but "", "0", "false" or
"no"), property tests run under the "ci" profile: examples are derived from
each test's source alone (`derandomize=True`) and no example database is read
or written, so every CI run of a commit draws the same examples. Elsewhere the
"dev" profile draws fresh examples on every run and keeps failures in
`.hypothesis/`, so new cases keep being found. `HYPOTHESIS_PROFILE=ci` (or
`dev`) picks one explicitly. Neither profile has a deadline or the too-slow
health check: tests never depend on wall time.

Under ``--dist loadgroup`` (`make test`) each test file is one group, so a
worker runs all of a file and its module fixtures are built once; files whose
tests share a session fixture that starts servers (``SHARED_SESSION_FIXTURES``)
form one group, so those servers start once in one worker; the files that start many
processes under deadlines (``PROCESS_HEAVY_FILES``) form another.

``--reverse-order`` runs the selected tests last to first (`make test-order`): with
the usual order, every two tests then run both ways round, so a test that depends on
what another left in a shared fixture fails in one of the two runs.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

# Session fixtures that start real servers: the files that use them run in one worker.
SHARED_SESSION_FIXTURES = ("vllm_servers",)
# Files whose runs start many processes (vLLM servers, fake-device meshes, whole
# benchmark jobs) under deadlines: side by side on a 2-core runner each starves the
# others past them, so they share one group and run one after another.
PROCESS_HEAVY_FILES = ("tests/distributed/test_two_process_vllm.py",
                       "tests/benchmarks/toy/test_toy_benchmark_stop.py",
                       "tests/sharding/test_launch_mesh.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Both derive from hypothesis's own defaults, not from whichever profile it
# loaded on import (it loads a built-in "ci" whenever `CI` exists, even empty).
_NO_WALL_TIME = dict(parent=settings.get_profile("default"), deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", derandomize=True, database=None, print_blob=True,
                          **_NO_WALL_TIME)
settings.register_profile("dev", **_NO_WALL_TIME)


def _profile_name() -> str:
  """`HYPOTHESIS_PROFILE` if set, else "ci" when `CI` is set, else "dev"."""
  if os.environ.get("HYPOTHESIS_PROFILE"):
    return os.environ["HYPOTHESIS_PROFILE"]
  on_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
  return "ci" if on_ci else "dev"


settings.load_profile(_profile_name())


def pytest_addoption(parser):
  parser.addoption("--reverse-order", action="store_true",
                   help="run the selected tests in reverse order (files and tests in them)")


def pytest_report_header(config):
  current = settings.default
  lines = [f"hypothesis profile: {settings.get_current_profile_name()} "
           f"(derandomize={current.derandomize}, database={current.database!r})"]
  if config.getoption("reverse_order"):
    lines.append("test order: reversed (--reverse-order)")
  return lines


# tryfirst: xdist's worker reads the groups in its own hook of the same name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
  """An ``xdist_group`` per test file, or the shared fixture's name for every file in
  which a test uses one of ``SHARED_SESSION_FIXTURES``, or one group for the
  ``PROCESS_HEAVY_FILES``; the reversal if asked for."""
  if config.getoption("reverse_order"):
    items.reverse()
  group_of = {}
  for item in items:
    shared = [f for f in SHARED_SESSION_FIXTURES if f in getattr(item, "fixturenames", ())]
    if shared:
      group_of[item.path] = shared[0]
    if os.path.relpath(item.path, ROOT) in PROCESS_HEAVY_FILES:
      group_of[item.path] = "process-heavy"
    group_of.setdefault(item.path, str(item.path))
  for item in items:
    item.add_marker(pytest.mark.xdist_group(group_of[item.path]))
