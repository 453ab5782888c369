"""Code for JAX's CPU backend only: the decode-attention kernel, the matmul's
weight gradient and the sampler's calls side by side. Reached through
`graft_jax.backends`, which uses it only when the backend is a CPU."""

from graft_jax.backends.cpu import decode_kernel
from graft_jax.backends.cpu.matmul import matmul_cpu

# The sampler's calls side by side on a CPU (`graft_jax.rollout.JaxSamplerEngine`'s
# `streams`): one decode step is a chain of small operations, many of which XLA:CPU
# runs on one core, and calls side by side fill the other cores' gaps. 4 was the
# fastest of 1, 2, 4 and 8 on the speed benchmark (BENCHMARKS.md).
SAMPLER_STREAMS = 4

__all__ = ["SAMPLER_STREAMS", "decode_kernel", "matmul_cpu"]
