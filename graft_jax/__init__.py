"""graft_jax: GRAFT and its baselines for RLVR in JAX."""
