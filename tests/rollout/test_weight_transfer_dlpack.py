"""Device addresses read from DLPack capsules (on CPU here: the same capsule layout)."""

import ctypes

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from graft_jax.rollout.weight_transfer import dlpack


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.uint8])
def test_buffer_points_at_the_arrays_bytes(dtype):
  x = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4).astype(dtype) * 3
  buf = dlpack.buffer(x)
  assert buf.ptr == x.unsafe_buffer_pointer()
  assert buf.nbytes == x.size * np.dtype(x.dtype).itemsize
  assert buf.device_type == dlpack.CPU
  golden = np.arange(24, dtype=np.float32).astype(
      ml_dtypes.bfloat16 if dtype == jnp.bfloat16 else dtype) * 3
  assert ctypes.string_at(buf.ptr, buf.nbytes) == golden.tobytes()


def test_a_host_buffer_is_refused_for_sending():
  with pytest.raises(RuntimeError, match="needs the trainer on a CUDA GPU"):
    dlpack.on_gpu(dlpack.buffer(jnp.zeros(3)))
