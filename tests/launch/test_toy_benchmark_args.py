"""launch/toy_benchmark.py refuses an unknown ``--only`` label in one line, before it builds
anything: a typo would otherwise run the initial cell alone and exit 0."""

import subprocess
import sys

from tests.launch.conftest import REPO


def test_an_unknown_only_label_is_one_line_naming_the_known_ones(tmp_path):
  proc = subprocess.run([sys.executable, "launch/toy_benchmark.py", "--smoke", "--only", "GRAFT",
                         "Graft", "--out", str(tmp_path / "out")], cwd=REPO, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 2 and proc.stdout == ""
  line, = proc.stderr.splitlines()
  assert line.startswith("usage error: --only: no method 'Graft'; the methods: 'GRPO n=8', ")
  assert "'GRAFT'" in line and "'delta=0.9'" in line
  assert not (tmp_path / "out").exists()
