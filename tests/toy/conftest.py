"""A tiny toy-pair build shared by the tests that need one (seconds, not minutes)."""

import pytest

from graft_jax.toy import ensure_toy_pair, tiny_config


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
  return ensure_toy_pair(tmp_path_factory.mktemp("toy") / "pair", tiny_config(),
                         evaluate=False)
