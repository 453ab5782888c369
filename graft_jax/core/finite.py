"""Whether an optimizer step's values are finite, and keeping the old state when not.

One NaN in a gradient makes every parameter NaN one step later, and a saved
NaN state outlives every good checkpoint once rotation runs; so the update
checks its loss, gradient norm and new parameters inside the compiled step; in
the skip mode it also keeps the previous parameters and optimizer state when any
is non-finite, so nothing leaves the device before the host reads the flags.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# The quantities of `nonfinite_flags`, in the order they are checked.
QUANTITIES = ("loss", "gradient norm", "updated parameters")


def all_finite(tree) -> jax.Array:
  """True when every inexact leaf of ``tree`` is finite (one reduction per leaf)."""
  ok = jnp.array(True)
  for leaf in jax.tree.leaves(tree):
    if jnp.issubdtype(leaf.dtype, jnp.inexact):
      ok = ok & jnp.isfinite(leaf).all()
  return ok


def nonfinite_flags(loss, grad_norm, new_params) -> jax.Array:
  """int32[3]: 1 where `QUANTITIES` (loss, gradient norm, new parameters) is non-finite."""
  return jnp.stack([~jnp.isfinite(loss), ~jnp.isfinite(grad_norm),
                    ~all_finite(new_params)]).astype(jnp.int32)


def keep_if_nonfinite(flags_3, new, old):
  """``new`` when ``flags_3`` are all 0, else ``old`` (same structure): a skipped step."""
  ok = ~flags_3.any()
  return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)


def checked(loss, grad_norm, old, new, *, keep_old: bool):
  """(the state, `nonfinite_flags` of ``new``'s parameters): ``old`` and ``new`` are
  (params, optimizer state); the state is ``new``, or with ``keep_old`` (the skip mode)
  ``old`` when a flag is set. The select keeps both alive, one more copy of the state at
  peak, so the stop mode, which never uses a flagged state, does without it."""
  flags_3 = nonfinite_flags(loss, grad_norm, new[0])
  return (keep_if_nonfinite(flags_3, new, old) if keep_old else new), flags_3
