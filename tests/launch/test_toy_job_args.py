"""launch/toy_job.py takes config fields as launch/train.py does: --config.<field>=<value>."""

import subprocess
import sys

import pytest

from graft_jax import toy
from graft_jax.experiments import toy_compare
from tests.launch.conftest import REPO


def test_config_flags_set_both_methods_after_the_jobs_own(tmp_path):
  cfgs = toy_compare.method_configs(toy.tiny_config(), ["optimizer.lr=3e-4", "graft.delta=0.9",
                                                        "total_steps=7"],
                                    workdir=tmp_path, seed=3, steps=5, jobs=2)
  assert list(cfgs) == ["grpo", "graft"]
  for method, cfg in cfgs.items():
    assert (cfg.method, cfg.workdir, cfg.seed) == (method, str(tmp_path / method), 3)
    assert (cfg.optimizer.lr, cfg.graft.delta, cfg.total_steps) == (3e-4, 0.9, 7)
    assert cfg.checkpoint.resume is True  # toy_compare.resume_or_start decides per run
  # Each run shows its steps, in whole lines named after it (`progress.shared_output`).
  assert [c.logging.progress_bar for c in cfgs.values()] == [True, True]
  smoke = toy_compare.method_configs(toy.tiny_config(), workdir=tmp_path, seed=0, smoke=True)
  assert {(c.total_steps, c.prompts_per_step) for c in smoke.values()} == {(2, 8)}


@pytest.mark.parametrize("flag,line", [
    ("--config.optimizer.lrr=1", "config error: --config.optimizer.lrr=1: no config field "
     "'optimizer.lrr' (did you mean 'optimizer.lr'?)"),
    ("--config.optimizer.lr=-1", "config error: optimizer.lr must be > 0, got -1 "
     "(from --config.optimizer.lr=-1.0)"),
    ("--config=configs/toy.py:grpo", "usage error: --config: the job picks its config files "
     "(configs/toy.py, configs/toy3.py); set fields with --config.<field>=<value>"),
], ids=["unknown", "impossible", "config file"])
def test_a_bad_config_flag_is_one_line_before_anything_is_built(tmp_path, flag, line):
  proc = subprocess.run([sys.executable, "launch/toy_job.py", "--smoke", "--workdir",
                         str(tmp_path / "w"), flag], cwd=REPO, capture_output=True, text=True,
                        timeout=300)
  assert (proc.returncode, proc.stdout + proc.stderr) == (2, line + "\n")
  assert not (tmp_path / "w").exists()
