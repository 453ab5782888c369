"""The weights the JAX sampler decodes from: cast to the sampling dtype and gathered
out of the FSDP shards once per call. On an FSDP mesh of 4 fake CPU devices the
compiled decode loops hold no collective at all (the trainer's sharded master
weights, decoded as they are, put gathers and reductions in every step), and the
tokens are one device's."""

import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from graft_jax.models import ModelConfig, init_model
from graft_jax.rollout import JaxSamplerEngine, SamplingParams
from graft_jax.rollout.decode_weights import decoding_sharding, decoding_weights
from graft_jax.sharding import make_mesh
from tests import fake_devices

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_decoding_sharding_drops_the_batch_axes_only():
  mesh = make_mesh(devices=jax.devices()[:1])
  batch = ("data", "fsdp")
  spec = lambda *s: decoding_sharding(NamedSharding(mesh, PartitionSpec(*s)), batch).spec
  assert spec("fsdp", "tensor") == PartitionSpec(None, "tensor")
  assert spec(("data", "fsdp"), None) == PartitionSpec(None, None)
  assert spec(("fsdp", "tensor"), None) == PartitionSpec("tensor", None)
  assert spec(None, "tensor") == PartitionSpec(None, "tensor")


def test_decoding_weights_cast_floats_once_and_keep_the_rest():
  state = {"w": jnp.asarray(np.random.default_rng(0).standard_normal((3, 4)), jnp.float32),
           "count": jnp.arange(3, dtype=jnp.int32)}
  out = decoding_weights(state, jnp.bfloat16)
  assert out["w"].dtype == jnp.bfloat16 and out["count"].dtype == jnp.int32
  # The same rounding as the per-step cast it replaces (float64 NumPy to bfloat16).
  np.testing.assert_array_equal(np.asarray(out["w"], np.float32),
                                np.asarray(np.asarray(state["w"], np.float64)
                                           .astype(jnp.bfloat16), np.float32))
  np.testing.assert_array_equal(out["count"], state["count"])
  assert decoding_weights(state, jnp.float32) is state  # nothing to change: no copy


def test_engine_decodes_from_the_compute_dtype():
  cfg = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=32, intermediate_size=48,
                    num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16)
  mixed = init_model(cfg, param_dtype=jnp.float32, dtype=jnp.bfloat16)
  engine = JaxSamplerEngine(mixed, eos_ids=-1, pad_id=0)
  assert {x.dtype for x in jax.tree.leaves(engine.state)} == {jnp.dtype(jnp.float32)}
  assert {x.dtype for x in jax.tree.leaves(engine.decoding_state())} == {
      jnp.dtype(jnp.bfloat16)}


@pytest.fixture(scope="module")
def report():
  env = fake_devices.env(4, PYTHONPATH=str(ROOT))
  proc = subprocess.run([sys.executable, "-m", "tests.rollout.decode_weights_script"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fsdp_mesh_decode_loops_gather_nothing(report):
  master, decoding = report["master"], report["decoding"]
  # The trainer's weights: fp32, the model dimension split over fsdp.
  assert "fsdp" in master["spec"] and master["dtype"] == "float32"
  assert "fsdp" not in decoding["spec"]
  assert decoding["while_loops"] == master["while_loops"] > 0
  # Decoded as they are, the sharded weights make every step communicate (the
  # check sees the collectives where they are) ...
  assert master["body"].get("all-gather") and master["body"].get("all-reduce")
  # ... and from the decoding weights no step does: no all-gather of a weight (of
  # any array), no reduction.
  assert decoding["body"] == {}, decoding["body"]
  assert report["bf16"] == "bfloat16"


@pytest.mark.slow
@pytest.mark.parametrize("temperature", ["0.0", "1.0"])
def test_fsdp_mesh_samples_what_one_device_samples(report, temperature):
  got, want = report["got"][temperature], report["want"][temperature]
  assert got["tokens"] == want["tokens"]
  np.testing.assert_allclose(got["logp"], want["logp"], rtol=1e-5, atol=1e-5)


def test_random_bf16_engine_times_a_warm_call():
  cfg = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=32, intermediate_size=48,
                    num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16)
  engine = JaxSamplerEngine.from_random(cfg, dtype=jnp.bfloat16, eos_ids=-1, pad_id=0)
  assert {x.dtype for x in jax.tree.leaves(engine.decoding_state())} == {
      jnp.dtype(jnp.bfloat16)}
  batch, seconds = engine.timed_generate([[3, 4, 5], [6]], 2, SamplingParams(max_new_tokens=5))
  assert batch.tokens_BxL.shape == (4, 5) and (batch.lengths_B == 5).all()
  assert 0 < seconds < 60
