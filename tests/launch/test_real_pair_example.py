"""The README's real-pair command, run as written for 2 steps on CPU: its Hub ids name tiny
stand-in models in a Hugging Face cache read offline, and the data its pair config reads are
small stand-in files (tests/data/test_prepare.py runs launch/prepare_data.py)."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from graft_jax.models import load_hf, load_tokenizer
from graft_jax.outputs import metrics_writer as metrics
from tests.launch.conftest import REPO
from tests.models import hub_cache

# The README's Hub ids -> the stand-ins' keys in `real_pair_files`.
STAND_INS = {"HuggingFaceTB/SmolLM3-3B-Base": "smollm3", "Qwen/Qwen3-1.7B-Base": "qwen3"}
# CPU-sized shapes; every path the run needs comes from the README's command.
SMALL = ["--steps=2", "--config.prompts_per_step=4", "--config.num_minibatches=2", "--config.n=2",
         "--config.max_response_len=6", "--config.eval.k=1", "--config.eval.max_examples=1",
         "--config.dtype=float32", "--config.reward.num_workers=1"]


def readme_command() -> list[str]:
  text = (REPO / "README.md").read_text()
  block = re.search(r"^(launch/train_smollm3_qwen3\.sh graft .*?)\n```", text, re.S | re.M)
  assert block, "README.md lost its real-pair example"
  return shlex.split(block.group(1).replace("\\\n", " "))


@pytest.mark.slow  # two models compile sampling, log-probs, update and validation: about a minute
def test_readme_real_pair_example_runs(real_pair_files, tmp_path):
  args = readme_command()
  assert {a.partition("=")[2] for a in args} >= set(STAND_INS), args
  cache = tmp_path / "hf_home" / "hub"
  commits = {repo: hub_cache.add_snapshot(cache, repo, real_pair_files[key])
             for repo, key in STAND_INS.items()}
  env = dict(os.environ, HF_HOME=str(cache.parent), HF_HUB_OFFLINE="1")
  # The files launch/prepare_data.py writes under data/, small.
  data = [f"--config.data.train_path={real_pair_files['train']}",
          f"--config.eval.data_dir={real_pair_files['eval']}"]
  work = tmp_path / "run"
  proc = subprocess.run(["bash", *args, *data, *SMALL, f"--workdir={work}",
                         "--config.checkpoint.export_dtype=bfloat16"], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  records = metrics.read_jsonl(work / "metrics.jsonl")
  assert [r["step"] for r in records] == [0, 1]
  assert "smollm3_3b/eval/average" in records[-1] and "qwen3_1p7b/eval/average" in records[-1]
  cfg = json.loads((work / "config.json").read_text())
  smollm3 = commits["HuggingFaceTB/SmolLM3-3B-Base"]
  assert cfg["model_a"]["path"] == str(
      cache / f"models--HuggingFaceTB--SmolLM3-3B-Base/snapshots/{smollm3}")
  assert cfg["model_a"]["revision"] == smollm3  # the weights it trained
  assert cfg["eval"]["data_dir"] == str(real_pair_files["eval"]) and cfg["n"] == 2
  # The closing summary: each model's validation pass@1, then the paths written.
  assert re.search(r"^  smollm3_3b: final \d\.\d{4} \(after step 2\), best", proc.stdout, re.M)
  assert f"  {work / 'metrics.jsonl'}" in proc.stdout
  # Each trained model as a Hugging Face folder (bf16, as asked), which launch/eval.py
  # takes as it is.
  assert f"  {work / 'hf'}" in proc.stdout
  # (tests/train/test_export_hf.py checks that the folders hold the trained weights.)
  for name, family in (("smollm3_3b", "smollm3"), ("qwen3_1p7b", "qwen3")):
    exported, _ = load_hf(work / "hf" / name)
    assert exported.cfg.model_type == family
    assert json.loads((work / "hf" / name / "config.json").read_text())["dtype"] == "bfloat16"
    assert load_tokenizer(work / "hf" / name).get_vocab() == \
        load_tokenizer(real_pair_files[family]).get_vocab()
  out = tmp_path / "eval.json"
  proc = subprocess.run([sys.executable, "launch/eval.py", f"--model={work / 'hf' / 'qwen3_1p7b'}",
                         f"--config=configs/benchmarks.py:{real_pair_files['eval']}",
                         "--config.k=1", "--config.limit=1", "--config.max_new_tokens=4",
                         f"--config.output={out}"],
                        cwd=REPO, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(out.read_text())
