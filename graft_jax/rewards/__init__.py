"""Binary math rewards: last-boxed extraction + math-verify, never hanging.

``score(responses, golds, *, timeout_s)`` is the public contract; it runs
math-verify in a reusable pool of worker processes (`VerifierPool`) with a hard
per-item timeout.
"""

from graft_jax.rewards.extract import last_boxed
from graft_jax.rewards.pool import VerifierPool
from graft_jax.rewards.score import DEFAULT_TIMEOUT_S
from graft_jax.rewards.score import ScoreStats
from graft_jax.rewards.score import check_golds
from graft_jax.rewards.score import default_pool
from graft_jax.rewards.score import score

__all__ = ["DEFAULT_TIMEOUT_S", "ScoreStats", "VerifierPool", "check_golds", "default_pool",
           "last_boxed", "score"]
