"""What a GPU weight push sends: each tensor once, in a stable order, in byte-capped
buckets, cast to the serving dtype on the device (checked against numpy casts)."""

import jax
import ml_dtypes
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings, strategies as st

from graft_jax.models import ModelConfig, init_model
from graft_jax.models.hf_io import hf_tensors
from graft_jax.rollout.weight_transfer import device
from graft_jax.rollout.weight_transfer.plan import (WireTensor, fit_buckets, vllm_packed_buckets,
                                                    wire_plan)


def _model(tied: bool):
  cfg = ModelConfig(model_type="smollm3" if tied else "qwen3", vocab_size=96, hidden_size=32,
                    intermediate_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                    head_dim=16, qk_norm=not tied, tie_word_embeddings=tied,
                    max_position_embeddings=64, eos_token_ids=(1,))
  return init_model(cfg, rngs=nnx.Rngs(3))


@pytest.mark.parametrize("tied", [True, False])
def test_each_tensor_once_in_parameter_order(tied):
  model = _model(tied)
  plan, _ = device.serving(model, "bfloat16")
  names = [t.name for t in plan]
  assert names == list(hf_tensors(model))  # same tensors, same order as the HF export
  assert len(set(names)) == len(names)
  assert ("lm_head.weight" in names) is not tied  # a tied head rides on the embedding
  assert {t.dtype for t in plan} == {np.dtype(ml_dtypes.bfloat16)}
  assert [t.dtype_name for t in plan][0] == "bfloat16"


def test_a_name_listed_twice_is_refused():
  with pytest.raises(ValueError, match="'w' twice"):
    wire_plan([("w", (2,), np.float32), ("w", (2,), np.float32)])


@pytest.mark.parametrize("tied,dtype,np_dtype", [(True, "bfloat16", ml_dtypes.bfloat16),
                                                 (False, "float16", np.float16),
                                                 (False, "auto", np.float32)])
def test_packed_buckets_hold_the_cast_bytes(tied, dtype, np_dtype):
  model = _model(tied)
  plan, sources = device.serving(model, dtype)
  cap = 16384  # >= the largest tensor (a 96x32 float32 embedding), < the model
  buckets = fit_buckets(plan, cap)
  golden = {k: np.ascontiguousarray(v.astype(np_dtype)).tobytes()
            for k, v in hf_tensors(model).items()}
  packed = list(device.packed_buckets(sources, buckets, jax.devices()[0]))
  assert len(packed) == len(buckets) > 1
  for bucket, array in zip(buckets, packed):
    assert array.dtype == np.uint8 and array.ndim == 1
    assert np.asarray(array).tobytes() == b"".join(golden[plan[i].name] for i in bucket)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(50, 200))
def test_fit_buckets_are_capped_ordered_and_full(sizes, cap):
  plan = [WireTensor(str(i), (s,), np.dtype(np.uint8)) for i, s in enumerate(sizes)]
  buckets = fit_buckets(plan, cap)
  assert [i for b in buckets for i in b] == list(range(len(sizes)))  # each once, in order
  assert all(sum(sizes[i] for i in b) <= cap for b in buckets)
  # Greedy: a bucket closes only when the next tensor would not fit.
  assert all(sum(sizes[i] for i in b) + sizes[n[0]] > cap for b, n in zip(buckets, buckets[1:]))


def test_fit_buckets_name_a_tensor_over_the_cap():
  plan = [WireTensor("small", (4,), np.dtype(np.float32)),
          WireTensor("big", (100,), np.dtype(np.float32))]
  with pytest.raises(ValueError, match="big is 400 bytes"):
    fit_buckets(plan, 100)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(1, 120))
def test_vllm_packed_buckets_cover_each_tensor_once(sizes, cap):
  plan = [WireTensor(str(i), (s,), np.dtype(np.uint8)) for i, s in enumerate(sizes)]
  buckets = vllm_packed_buckets(plan, cap)
  assert [i for b in buckets for i in b] == list(range(len(sizes)))
  # Every bucket but the last went over the cap only with its last tensor.
  for b in buckets[:-1]:
    assert sum(sizes[i] for i in b) > cap >= sum(sizes[i] for i in b[:-1])


@pytest.mark.parametrize("tied", [True, False])
def test_head_copy_serves_a_tied_head_to_an_untied_server(tied):
  model = _model(tied)
  once, _ = device.serving(model, "float32")
  plan, sources = device.serving(model, "float32", head_copy=True)
  if not tied:
    assert plan == once
    return
  assert plan[:-1] == once and plan[-1].name == "lm_head.weight"
  embedding = next(i for i, t in enumerate(plan) if t.name == "model.embed_tokens.weight")
  assert plan[-1].shape == plan[embedding].shape
  assert sources[-1][1] is sources[embedding][1]  # one trainer tensor, sent under both names


_SHARDED = """
import jax, ml_dtypes, numpy as np
jax.config.update("jax_num_cpu_devices", 4)
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P
from graft_jax.models import ModelConfig, init_model
from graft_jax.models.hf_io import hf_tensors
from graft_jax.rollout.weight_transfer import device
from graft_jax.rollout.weight_transfer.plan import fit_buckets
cfg = ModelConfig(model_type="qwen3", vocab_size=96, hidden_size=32, intermediate_size=64,
                  num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, qk_norm=True,
                  max_position_embeddings=64, eos_token_ids=(1,))
model = init_model(cfg, rngs=nnx.Rngs(5))
golden = {k: v.astype(ml_dtypes.bfloat16).tobytes() for k, v in hf_tensors(model).items()}
mesh = jax.make_mesh((4,), ("d",))
graphdef, state = nnx.split(model)
state = jax.tree.map(lambda x: jax.device_put(x, NamedSharding(
    mesh, P("d") if x.shape[0] % 4 == 0 else P())), state)
model = nnx.merge(graphdef, state)
assert any(len(x.sharding.device_set) == 4 and not x.is_fully_replicated
           for x in jax.tree.leaves(state))
plan, sources = device.serving(model, "bfloat16")
buckets = fit_buckets(plan, 16384)
target = jax.devices()[2]
packed = list(device.packed_buckets(sources, buckets, target))
assert all(p.devices() == {target} for p in packed)
assert b"".join(np.asarray(p).tobytes() for p in packed) == b"".join(golden[t.name] for t in plan)
print("ok", len(buckets))
"""


def test_sharded_parameters_are_gathered_onto_the_sending_device():
  import subprocess
  import sys
  out = subprocess.run([sys.executable, "-c", _SHARDED], capture_output=True, text=True,
                       timeout=300, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.startswith("ok")
