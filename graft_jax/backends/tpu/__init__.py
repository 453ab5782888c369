"""Code for JAX's TPU backend only: decode attention over each row's live span
(a Pallas kernel). Reached through `graft_jax.backends`."""

from graft_jax.backends.tpu import live_decode

__all__ = ["live_decode"]
