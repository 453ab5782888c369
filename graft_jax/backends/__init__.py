"""The one place that picks backend-specific code, by `jax.default_backend()`.

Speed code written for one backend lives in a subpackage of its own
(`graft_jax.backends.cpu`) and is reached only through the functions here,
which use it when `platform()` is that backend and plain JAX otherwise: a
program traced for a GPU or TPU holds none of the CPU code (no custom VJP
around the matmul, no call into the CPU decode kernel), and on a CPU it is on
by default.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
from jax._src import config as jax_config  # a setting in the jit cache key: `traced_for`

from graft_jax.backends import cpu, gpu, tpu


# The backend `traced_for` names, and whether programs are only lowered for it: a JAX
# setting in the jit cache's key, so a function jitted once and traced again for another
# target is traced again (a cached trace of one target never stands in for another).
_BACKENDS = ("cpu", "gpu", "tpu")
_TARGET = jax_config.enum_state(
    name="graft_jax_traced_for",
    enum_values=["", *_BACKENDS, *(f"{b}:lowering" for b in _BACKENDS)], default="",
    help="The backend graft_jax traces programs for (graft_jax.backends.traced_for).",
    include_in_jit_key=True, include_in_trace_context=True)


# The compute capabilities a GPU target may name (`traced_for`'s ``capability``): CUDA's
# from Volta on. A setting in the jit cache's key, as the target is: a program traced for a
# GPU of one capability is never reused for another, nor for a GPU of none known.
GPU_CAPABILITIES = ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3",
                    "12.0", "12.1")
_CAPABILITY = jax_config.enum_state(
    name="graft_jax_traced_for_capability", enum_values=["", *GPU_CAPABILITIES], default="",
    help="The compute capability of the GPU graft_jax traces for (backends.traced_for).",
    include_in_jit_key=True, include_in_trace_context=True)


def _target() -> tuple[str, bool]:
  """(backend, lowering) of the innermost `traced_for`; ('', False) outside one."""
  name, _, lowering = _TARGET.value.partition(":")
  return name, bool(lowering)


def platform() -> str:
  """The backend programs are traced for: 'cpu', 'gpu' or 'tpu' (JAX's default
  backend, or the one `traced_for` names)."""
  return _target()[0] or jax.default_backend()


@contextlib.contextmanager
def traced_for(name: str, *, lowering: bool = False, capability: str | None = None):
  """Programs traced inside are traced as for backend ``name`` ('cpu', 'gpu' or 'tpu'):
  a planner on a CPU compiles a GPU run's programs without the CPU-only code. With
  ``lowering`` the programs are only lowered for that backend's hardware (``jax.export``
  with ``platforms=``), never run here, so its Pallas kernels are traced as that
  hardware runs them (`kernels_native`) rather than in Pallas's interpreter.
  ``capability`` (a GPU's, one of `GPU_CAPABILITIES`) names the GPU: the door answers
  for it (`packed_attention_kernel`) where none is named to it. The target and the
  capability are part of every jitted function's cache key."""
  if name not in _BACKENDS:
    raise ValueError(f"traced_for takes one of {_BACKENDS}, got {name!r}")
  if capability is not None and (name != "gpu" or capability not in GPU_CAPABILITIES):
    raise ValueError(f"traced_for's capability names a GPU's, one of {GPU_CAPABILITIES}; "
                     f"got {capability!r} for {name!r}")
  with _TARGET(f"{name}:lowering" if lowering else name), _CAPABILITY(capability or ""):
    yield


def target_capability() -> str | None:
  """The compute capability the innermost `traced_for` names (None: none named)."""
  return _CAPABILITY.value or None


def kernels_native() -> bool:
  """Whether a Pallas kernel written for `platform()` is traced for its hardware (True)
  or for Pallas's interpreter (False): native where the programs run on that backend,
  or are lowered for it (`traced_for` with ``lowering``)."""
  return _target()[1] or platform() == jax.default_backend()


def packed_attention_kernel(dtype, head_dim: int, *, capability: str | None = None) -> str:
  """The kernel a GPU attends packed rows (segment ids) with: 'cudnn_packed', cuDNN's
  flash attention over each sequence in its packed layout
  (`graft_jax.models.packed_attention`), where the GPU is CUDA's with compute
  capability >= 9.0 (cuDNN packs only from Hopper on, cuDNN >= 9.6), the inputs bf16
  / fp16 and head_dim <= 128 (cuDNN's flash-attention conditions here); else 'pallas',
  the Pallas GPU flash kernel masking by segment id, which every GPU runs.

  ``capability`` ('9.0') names the target GPU; by default the one `traced_for` names,
  else the local GPU's where programs run here. Lowered for hardware not here
  (`traced_for` with ``lowering``) with none named, or on ROCm, no capability is known
  and the choice is 'pallas'."""
  if jnp.dtype(dtype).name not in ("bfloat16", "float16") or head_dim > 128:
    return "pallas"
  if capability is None:
    capability = target_capability() or _local_cuda_capability()
  if capability is None:
    return "pallas"
  return "cudnn_packed" if tuple(map(int, capability.split("."))) >= (9, 0) else "pallas"


def _local_cuda_capability() -> str | None:
  """This machine's first CUDA GPU's compute capability where programs are traced for
  it and run here with cuDNN >= 9.6 (JAX's packed layout's own floor), else None."""
  if platform() != "gpu" or jax.default_backend() != "gpu" or _target()[1]:
    return None
  device = jax.local_devices(backend="gpu")[0]
  if "cuda" not in device.client.platform_version.lower():
    return None
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa  # pylint: disable=import-outside-toplevel
  try:
    version = cudnn_fa.check_cudnn_version()
  except RuntimeError:
    return None
  return getattr(device, "compute_capability", None) if version >= 90600 else None


def matmul(x_MxK, w_KxN):
  """``x @ w`` for 2-D operands of one dtype; on a CPU with the weight gradient of
  `graft_jax.backends.cpu.matmul`, elsewhere plain autodiff."""
  if platform() == "cpu":
    return cpu.matmul_cpu(x_MxK, w_KxN)
  return x_MxK @ w_KxN


def einsum_f32(spec: str, a, b):
  """``jnp.einsum(spec, a, b)`` accumulated and returned in float32. A GPU or TPU takes
  bf16 operands with a float32 result in one dot; XLA's CPU runtime has no batched
  bf16 x bf16 -> f32 dot, so on a CPU the operands are widened first."""
  if platform() == "cpu":
    return jnp.einsum(spec, a.astype(jnp.float32), b.astype(jnp.float32))
  return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)


def decode_attention_reason(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH) -> str | None:
  """Why a decode step's attention cannot run in the CPU kernel here (None: it
  can): the backend first, then the kernel's own conditions
  (`graft_jax.backends.cpu.decode_kernel.applies`)."""
  if platform() != "cpu":
    return f"runs on CPUs only, the backend is {platform()}"
  return cpu.decode_kernel.applies(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH)


def decode_attention(*operands, scale: float):
  """The CPU kernel's decode step (`graft_jax.backends.cpu.decode_kernel.decode_attention`);
  call it only where `decode_attention_reason` gives None."""
  return cpu.decode_kernel.decode_attention(*operands, scale=scale)


def live_decode_attention(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B, *, scale: float,
                          block_k: int = 64):
  """A decode step's attention over each row's live slots [start_B, end_B) that reads
  only the KV blocks meeting them: on a TPU the kernel of `graft_jax.backends.tpu.live_decode`
  (blocks copied out of HBM by hand), elsewhere that of `graft_jax.backends.gpu.live_decode`,
  each in Pallas's interpret mode (slow; for checks) off its own hardware. Returns
  (out_BxKxGxH, blocks read per row and kv head)."""
  kernel = tpu.live_decode if platform() == "tpu" else gpu.live_decode
  return kernel.decode_attention(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B,
                                 scale=scale, block_k=block_k,
                                 interpret=not live_decode_by_default())


def live_decode_granule() -> int:
  """The cache slots a live-span kernel's block is a multiple of: a TPU's 128 lanes,
  Triton's smallest dot (16) elsewhere. Samplers size their windows in these."""
  return tpu.live_decode.LANES if platform() == "tpu" else 16


def live_decode_block(slots: int) -> int:
  """The live-span kernel's KV block for a window of ``slots`` (0: no block divides it).
  Larger blocks mean fewer copies and more slots read past a span's ends."""
  sizes = (256, 128) if platform() == "tpu" else (64, 32, 16)
  return next((k for k in sizes if slots % k == 0), 0)


def live_decode_by_default() -> bool:
  """Whether a sampler's 'auto' decode attention is a live-span kernel: programs traced
  for a GPU or TPU and run on one. Elsewhere the kernels run in Pallas's interpret mode,
  which is for checks only, and XLA's attention stays the reference."""
  return platform() in ("gpu", "tpu") and kernels_native()


def sampler_streams() -> int:
  """The JAX sampler's calls side by side when none is asked for: `cpu.SAMPLER_STREAMS`
  on a CPU, 1 elsewhere (on an accelerator one call's operations fill the device)."""
  return cpu.SAMPLER_STREAMS if platform() == "cpu" else 1
