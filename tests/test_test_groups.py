"""The suite's xdist groups (tests/conftest.py) name files that exist: a renamed file
would silently leave its group and run beside the others again."""

import pathlib

from tests import conftest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_process_heavy_files_exist():
  missing = [f for f in conftest.PROCESS_HEAVY_FILES if not (ROOT / f).is_file()]
  assert not missing, missing
  assert pathlib.Path(conftest.ROOT) == ROOT
