"""Rollout engines behind one protocol: the in-process JAX samplers (static
batches and a slot pool) and vLLM sidecars."""

from graft_jax.rollout.continuous import ContinuousSamplerEngine
from graft_jax.rollout.jax_engine import JaxSamplerEngine
from graft_jax.rollout.types import RolloutBatch, RolloutEngine, SamplingParams
from graft_jax.rollout.vllm_engine import VLLMEngine, WeightSyncError
from graft_jax.rollout.vllm_sidecar import SidecarError, SidecarOptions

__all__ = ["ContinuousSamplerEngine", "JaxSamplerEngine", "RolloutBatch", "RolloutEngine",
           "SamplingParams", "SidecarError", "SidecarOptions", "VLLMEngine", "WeightSyncError"]
