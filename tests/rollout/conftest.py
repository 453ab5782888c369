"""Fixtures for the rollout tests; they reuse the model tests' tiny HF checkpoints."""

import pathlib
import sys

import pytest

# tests/ has no packages; the checkpoint helpers live with the model tests.
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "models"))
import tiny_hf  # noqa: E402
from vllm_fixtures import vllm_pair, vllm_servers  # noqa: E402,F401  (the test_vllm_* servers)


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory):
  return tmp_path_factory.mktemp("tiny_hf_rollout")


@pytest.fixture(params=tiny_hf.FAMILIES)
def ckpt(request, ckpt_root):
  return tiny_hf.checkpoint(request.param, ckpt_root)
