"""Binary math rewards: last-boxed extraction + math-verify, never hanging.

``score(responses, golds, *, timeout_s)`` is the public contract; it runs
math-verify in a reusable pool of worker processes (`VerifierPool`) with a hard
per-item timeout. ``make_reward(kind)`` picks the run's reward by name
(``reward.kind``): ``math_verify``, ``synthetic_exact`` (``exact_score``) or a
dotted path to your own.
"""

from graft_jax.rewards.exact import exact_score
from graft_jax.rewards.extract import last_boxed
from graft_jax.rewards.pool import VerifierPool
from graft_jax.rewards.score import DEFAULT_TIMEOUT_S
from graft_jax.rewards.score import ScoreStats
from graft_jax.rewards.score import check_golds
from graft_jax.rewards.score import default_pool
from graft_jax.rewards.score import score
from graft_jax.rewards.select import KINDS
from graft_jax.rewards.select import RewardError
from graft_jax.rewards.select import make_reward
from graft_jax.rewards.select import uses_verifier_pool

__all__ = ["DEFAULT_TIMEOUT_S", "KINDS", "RewardError", "ScoreStats", "VerifierPool",
           "check_golds", "default_pool", "exact_score", "last_boxed", "make_reward", "score",
           "uses_verifier_pool"]
