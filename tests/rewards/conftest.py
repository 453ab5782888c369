"""One verifier pool shared by the reward tests (workers take ~1 s to start)."""

import pytest

from graft_jax import rewards


@pytest.fixture(scope="session")
def pool():
  with rewards.VerifierPool(2) as p:
    yield p
