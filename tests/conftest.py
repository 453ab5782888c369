"""Suite-wide pytest set-up: the hypothesis profile (reproducible on CI, random locally).

With the `CI` environment variable set (to anything but "", "0", "false" or
"no"), property tests run under the "ci" profile: examples are derived from
each test's source alone (`derandomize=True`) and no example database is read
or written, so every CI run of a commit draws the same examples. Elsewhere the
"dev" profile draws fresh examples on every run and keeps failures in
`.hypothesis/`, so new cases keep being found. Neither profile has a deadline
or the too-slow health check: tests never depend on wall time.
"""

import os

from hypothesis import HealthCheck, settings

_NO_WALL_TIME = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", derandomize=True, database=None, print_blob=True,
                          **_NO_WALL_TIME)
settings.register_profile("dev", **_NO_WALL_TIME)


def _on_ci() -> bool:
  return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


settings.load_profile("ci" if _on_ci() else "dev")


def pytest_report_header(config):
  del config
  current = settings.default
  return (f"hypothesis profile: {settings.get_current_profile_name()} "
          f"(derandomize={current.derandomize}, database={current.database!r})")
