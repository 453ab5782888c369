"""The mean token NLL of a batch and its gradient, keyed by per-layer parameter paths
(``layer_storage.per_layer_params``), so models with either block storage compare."""

import jax
import numpy as np
from flax import nnx

from graft_jax.models import layer_storage, token_logprobs


def nll_and_grads(model, ids_BxT, mask_BxT) -> tuple[float, dict]:
  graphdef, state = nnx.split(model)

  def loss(state):
    logp = token_logprobs(nnx.merge(graphdef, state), ids_BxT, mask_BxT)
    return -(logp * mask_BxT).sum() / mask_BxT.sum()

  value, grads = jax.jit(jax.value_and_grad(loss))(state)
  return float(value), {k: np.asarray(g) for k, g in
                        layer_storage.per_layer_params(nnx.merge(graphdef, grads))}
