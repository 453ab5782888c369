"""`graft_jax.backends` is the one door to the CPU-only code: with the backend taken
for a GPU, a tiny decoder's forward + backward and its sampler's decode step trace
none of it (no custom VJP around the matmul, no call into the CPU decode kernel, no
host callback); on a CPU they trace both, and the sampler's default streams follow."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graft_jax import backends
from graft_jax.backends.cpu import decode_kernel
from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import JaxSamplerEngine
from graft_jax.rollout.sampler import generate_padded

CFG = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=32, intermediate_size=48,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32, qk_norm=True)
HOST = decode_kernel.host_reason()


@pytest.fixture(params=["cpu", "gpu"])
def platform(request, monkeypatch):
  """The backend the door sees; the traces are cleared so no program traced for the
  other one is reused."""
  monkeypatch.setattr(backends, "platform", lambda: request.param)
  jax.clear_caches()
  yield request.param
  jax.clear_caches()


def test_forward_and_backward_trace_the_cpu_matmul_only_on_a_cpu(platform):
  model = init_model(CFG, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  ids_BxT = jnp.asarray(np.random.default_rng(0).integers(0, 61, (2, 7)), jnp.int32)

  def loss(state):
    return nnx.merge(graphdef, state)(ids_BxT).mean()

  forward = str(jax.make_jaxpr(loss)(state))
  step = str(jax.make_jaxpr(jax.value_and_grad(loss))(state))
  lowered = jax.jit(jax.value_and_grad(loss)).lower(state).as_text()
  assert "dot_general" in forward and "dot_general" in lowered  # the projections are there
  for text in (forward, step, lowered):
    assert "callback" not in text
  # 7 projections per block. Differentiated, the custom VJP leaves its backward's
  # materialised transpose (an optimization barrier) in the program.
  projections = 7 * CFG.num_layers
  if platform == "gpu":
    assert "matmul_cpu" not in forward and "_matmul_bwd" not in forward
    assert "optimization_barrier" not in step and "optimization_barrier" not in lowered
  else:
    assert forward.count("name=matmul_cpu") == projections
    assert step.count("optimization_barrier") == projections
    assert "optimization_barrier" in lowered


def _decode_text(model) -> str:
  """The sampler's compiled program (prefill and decode loop), lowered to StableHLO."""
  graphdef, state = nnx.split(model)
  ids = np.ones((2, 16), np.int32)
  return generate_padded.lower(
      graphdef, state, ids, np.ones_like(ids, bool), np.ones(2, bool), jax.random.key(0),
      np.int32(4), np.float32(1.0), np.float32(1.0), n=2, max_new=16, eos_ids=(1,),
      pad_id=0, greedy=False, top_k=0, use_top_p=False).as_text()


@pytest.mark.skipif(HOST is not None, reason=f"the CPU kernel cannot run: {HOST}")
def test_decode_step_calls_the_cpu_kernel_only_on_a_cpu(platform):
  text = _decode_text(init_model(CFG, rngs=nnx.Rngs(0)))
  assert "stablehlo.while" in text
  assert "callback" not in text
  assert (decode_kernel.TARGET in text) == (platform == "cpu")
  if platform == "gpu":
    assert "custom_call" not in text


def test_a_gpu_refuses_the_kernel_with_one_line(platform):
  model = init_model(CFG, rngs=nnx.Rngs(0))
  model.set_decode_attention("kernel")
  if platform == "gpu":
    with pytest.raises(ValueError, match="runs on CPUs only, the backend is gpu"):
      _decode_text(model)
  else:
    assert backends.decode_attention_reason(
        jnp.zeros((1, 1, 2, 32)), jnp.zeros((1, 1, 32, 4)), jnp.zeros((1, 1, 4, 32))) == HOST


def test_sampler_streams_by_backend(platform):
  engine = JaxSamplerEngine(init_model(CFG, rngs=nnx.Rngs(0)), eos_ids=1, pad_id=0)
  assert engine.streams == (4 if platform == "cpu" else 1)
  assert JaxSamplerEngine(init_model(CFG, rngs=nnx.Rngs(0)), eos_ids=1, pad_id=0,
                          streams=3).streams == 3


def test_einsum_f32_of_bf16_operands_is_float32_and_exact(monkeypatch):
  """On a CPU, bf16 operands are widened and the products summed in float32: float64
  NumPy of the same bf16 values, to float32's rounding."""
  monkeypatch.setattr(backends, "platform", lambda: "cpu")
  rng = np.random.default_rng(7)
  a = jnp.asarray(rng.normal(size=(2, 3, 2, 4, 16)), jnp.bfloat16)
  b = jnp.asarray(rng.normal(size=(2, 2, 16, 5)), jnp.bfloat16)
  got = jax.jit(lambda a, b: backends.einsum_f32("btkgh,bkhs->bkgts", a, b))(a, b)
  want = np.einsum("btkgh,bkhs->bkgts", np.asarray(a, np.float64), np.asarray(b, np.float64))
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_einsum_f32_keeps_bf16_operands_for_a_gpu(monkeypatch):
  """Traced for a GPU, the dot takes the bf16 operands as they are, with a float32
  result (the tensor cores' bf16 path), and nothing widens them."""
  monkeypatch.setattr(backends, "platform", lambda: "gpu")
  a = jnp.zeros((2, 3, 2, 4, 16), jnp.bfloat16)
  b = jnp.zeros((2, 2, 16, 5), jnp.bfloat16)
  jaxpr = jax.make_jaxpr(lambda a, b: backends.einsum_f32("btkgh,bkhs->bkgts", a, b))(a, b)
  dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
  assert len(dots) == 1 and dots[0].params["preferred_element_type"] == jnp.float32
  assert [v.aval.dtype for v in dots[0].invars] == [jnp.bfloat16, jnp.bfloat16]
  assert not [e for e in jaxpr.eqns if e.primitive.name == "convert_element_type"]


@pytest.mark.parametrize("dtype,head_dim,capability,want", [
    (jnp.bfloat16, 128, "9.0", "cudnn_packed"),   # H100 / H200
    (jnp.float16, 64, "10.0", "cudnn_packed"),    # Blackwell
    (jnp.bfloat16, 128, "8.0", "pallas"),         # A100: cuDNN packs from Hopper on
    (jnp.bfloat16, 128, "8.9", "pallas"),         # L40S / RTX 4090
    (jnp.float32, 128, "9.0", "pallas"),          # cuDNN's flash kernel: half precision
    (jnp.bfloat16, 256, "9.0", "pallas"),         # head_dim above 128
])
def test_packed_attention_kernel_for_a_named_gpu(dtype, head_dim, capability, want):
  assert backends.packed_attention_kernel(dtype, head_dim, capability=capability) == want


@pytest.mark.parametrize("lowering", [False, True])
def test_packed_attention_kernel_with_no_gpu_known_is_pallas(lowering):
  """Traced for a GPU on this CPU (a planner) or lowered for one with no capability
  named: none is known, and the kernel every GPU runs is chosen."""
  with backends.traced_for("gpu", lowering=lowering):
    assert backends.packed_attention_kernel(jnp.bfloat16, 128) == "pallas"
    assert backends.packed_attention_kernel(jnp.bfloat16, 128, capability="9.0") == (
        "cudnn_packed")


def test_a_jitted_function_is_traced_again_for_another_target():
  """The target is in the jit cache's key: a trace for one backend never stands in for
  another's, and going back finds the first trace cached."""
  traces = []

  @jax.jit
  def which(x):
    traces.append(backends.platform())
    return x + {"cpu": 1.0, "gpu": 2.0, "tpu": 3.0}[backends.platform()]

  assert float(which(0.0)) == 1.0
  with backends.traced_for("gpu"):
    assert float(which(0.0)) == 2.0
    with backends.traced_for("tpu", lowering=True):
      assert backends.kernels_native() and float(which(0.0)) == 3.0
  assert float(which(0.0)) == 1.0
  assert traces == ["cpu", "gpu", "tpu"]
  with pytest.raises(ValueError, match="one of"):
    with backends.traced_for("cuda"):
      pass


def test_a_jitted_function_is_traced_again_for_a_gpu_of_another_capability():
  """The capability `traced_for` names is in the jit cache's key, as the target is: a
  trace for a GPU of none known is never reused for an H100, nor the other way round."""
  traces = []

  @jax.jit
  def kernel(x):
    traces.append(backends.packed_attention_kernel(jnp.bfloat16, 128))
    return x + {"pallas": 1.0, "cudnn_packed": 2.0}[traces[-1]]

  with backends.traced_for("gpu", lowering=True):
    assert backends.target_capability() is None and float(kernel(0.0)) == 1.0
    with backends.traced_for("gpu", lowering=True, capability="9.0"):
      assert backends.target_capability() == "9.0" and float(kernel(0.0)) == 2.0
    assert float(kernel(0.0)) == 1.0
  with backends.traced_for("gpu", lowering=True, capability="8.0"):
    assert float(kernel(0.0)) == 1.0
  assert traces == ["pallas", "cudnn_packed", "pallas"]
  for name, capability in (("tpu", "9.0"), ("gpu", "9")):
    with pytest.raises(ValueError, match="capability"):
      with backends.traced_for(name, capability=capability):
        pass
