"""Two runs writing to one log (the toy job's workers under ``make demo > log``): every
line is whole and names its run, and each run's lines keep their order.

Two real processes log as the launchers do (``cli.setup_logging``) and write their
steps through ``MetricsWriter``'s progress bar, both into one open file, as a shell's
redirection hands it to a job's processes.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = 40

WRITER = """
import logging, sys
from graft_jax import cli
from graft_jax.outputs import progress
from graft_jax.outputs.metrics_writer import MetricsWriter

name, workdir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
cli.setup_logging(verbose=True)  # this script's INFO too
log = logging.getLogger("graft_jax.test")
with progress.shared_output(name):
  writer = MetricsWriter(workdir, total_steps=steps, tensorboard=False)
  for step in range(steps):
    progress.phase(f"sampling step {step + 1}")
    writer.write(step, {"toy_a": {"reward_mean": step / steps},
                        "toy_b": {"reward_mean": 0.5}})
    if step % 5 == 4:
      log.info("validating after step %d", step + 1)
      log.warning("two lines\\nin one record (step %d)", step + 1)
  writer.close()
"""


def test_two_runs_share_a_log_line_by_line(tmp_path):
  log_path = tmp_path / "log"
  with open(log_path, "wb") as log:  # one open file, both processes' stderr and stdout
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, name, str(tmp_path / name),
                               str(STEPS)], cwd=ROOT, stdout=log, stderr=log)
             for name in ("grpo", "graft")]
    for p in procs:
      assert p.wait(timeout=300) == 0
  text = log_path.read_text()
  assert "\r" not in text and "\x1b" not in text  # no bar redrawn in place
  line = re.compile(r"^\[(grpo|graft)\] (step (\d+)/40: toy_a: reward \S+ \| toy_b: reward 0\.5"
                    r"|sampling step \d+|validating after step (\d+)|warning: two lines|in one record \(step \d+\))$")
  steps = {"grpo": [], "graft": []}
  for got in text.splitlines():
    m = line.match(got)
    assert m, got
    if m[3]:
      steps[m[1]].append(int(m[3]))
  assert steps == {"grpo": list(range(1, STEPS + 1)), "graft": list(range(1, STEPS + 1))}
  assert text.count("validating after step") == 2 * STEPS // 5


def test_a_stream_without_a_file_gets_the_same_lines(capsys):
  """sys.stderr replaced by a stream in memory, as a notebook or pytest's capsys does."""
  from graft_jax.outputs import progress
  with progress.shared_output("grpo"):
    progress.write_lines("a\nb")
  assert capsys.readouterr().err == "[grpo] a\n[grpo] b\n"
