"""Fixtures for the model tests: tiny random HF checkpoints, one per family."""

import pytest
import tiny_hf


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory):
  return tmp_path_factory.mktemp("tiny_hf")


@pytest.fixture(params=tiny_hf.FAMILIES)
def ckpt(request, ckpt_root):
  return tiny_hf.checkpoint(request.param, ckpt_root)
