"""Code for JAX's GPU backend only: decode attention over each row's live span
(a Pallas kernel). Reached through `graft_jax.backends`."""

from graft_jax.backends.gpu import live_decode

__all__ = ["live_decode"]
