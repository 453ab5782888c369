"""Suite-wide pytest set-up: the hypothesis profile (reproducible on CI, random locally).

With the `CI` environment variable set (to anything but "", "0", "false" or
"no"), property tests run under the "ci" profile: examples are derived from
each test's source alone (`derandomize=True`) and no example database is read
or written, so every CI run of a commit draws the same examples. Elsewhere the
"dev" profile draws fresh examples on every run and keeps failures in
`.hypothesis/`, so new cases keep being found. `HYPOTHESIS_PROFILE=ci` (or
`dev`) picks one explicitly. Neither profile has a deadline or the too-slow
health check: tests never depend on wall time.
"""

import os

from hypothesis import HealthCheck, settings

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


def pytest_report_header(config):
  del config
  current = settings.default
  return (f"hypothesis profile: {settings.get_current_profile_name()} "
          f"(derandomize={current.derandomize}, database={current.database!r})")
