"""Packed rows on a GPU: cuDNN's packed layout and the Pallas kernel, checked on a CPU.

cuDNN's kernel cannot run here and JAX offers no XLA stand-in for its packed layout
(``jax.nn.dot_product_attention``'s 'xla' implementation takes one span per row).
What is checked: the segment ids -> (offsets, lengths) conversion against a NumPy
walk of the rows, and JAX's own rewrite of those into cuDNN's ragged offsets; and
that forward and gradient lower for CUDA (``jax.export``, ``platforms=['cuda']``)
with cuDNN's custom calls carrying the packed operands. For the lowering, two
queries of the installed cuDNN and GPU are replaced with an H100's answers:
``check_cudnn_version`` (9.10) and the compute-capability tests
``check_compute_capability`` / ``is_cuda_compute_capability_equal`` (9.0). They
only pick which cuDNN graph JAX emits; no number is computed by them or here.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import export
from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa

from graft_jax import backends
from graft_jax.models import ModelConfig, init_model, token_logprobs
from graft_jax.models import attention as attention_lib
from graft_jax.models import packed_attention

CUDNN_FWD, CUDNN_BWD = "__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"
TRITON = "__gpu$xla.gpu.triton"
CHECKS = [export.DisabledSafetyCheck.custom_call(n) for n in (CUDNN_FWD, CUDNN_BWD, TRITON)]


def _runs(seg_T):
  """[(start, length)] of the maximal runs of one nonzero id, walking the row."""
  runs, prev = [], 0
  for t, s in enumerate(seg_T):
    if s > 0 and s == prev:
      runs[-1][1] += 1
    elif s > 0:
      runs.append([t, 1])
    prev = s
  return [tuple(r) for r in runs]


SEG = np.array([
    [1, 1, 1, 2, 2, 3, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],   # a filler row: no sequence
    [5, 5, 0, 0, 7, 7, 7, 2, 0, 2, 2, 2],   # gaps, any ids, an id again after a gap
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9],   # more runs than max_segments
], np.int32)


@pytest.mark.parametrize("max_segments", [3, 16])
def test_segment_runs_match_a_walk_of_each_row(max_segments):
  offsets, seqlen, count = map(np.asarray, packed_attention.segment_runs(
      jnp.asarray(SEG), max_segments))
  assert offsets.shape == (4, max_segments + 1) and seqlen.shape == (4, max_segments)
  for r, row in enumerate(SEG):
    runs = _runs(row)
    assert count[r] == len(runs)
    kept = runs[:max_segments]
    pad = max_segments - len(kept)
    np.testing.assert_array_equal(offsets[r], [s for s, _ in kept] + [-1] * (pad + 1))
    np.testing.assert_array_equal(seqlen[r], [n for _, n in kept] + [-1] * pad)
  assert bool(packed_attention.fits(jnp.asarray(SEG[:3]), 4))  # 3, 0 and 4 runs
  assert not bool(packed_attention.fits(jnp.asarray(SEG), 4))


def test_jax_turns_the_runs_into_cudnn_ragged_offsets():
  """JAX's rewrite before the custom call (``_fix_seqlen_offsets``): every sequence of
  the batch in order, its first token's element offset in the flattened B x T x N x H
  query, then the batch's end; lengths in the same order, 0 after."""
  b, t, n, h = SEG.shape + (4, 8)
  q = jnp.zeros((b, t, n, h), jnp.bfloat16)
  offsets, seqlen, _ = packed_attention.segment_runs(jnp.asarray(SEG), 16)
  lens, _, cu, _ = map(np.asarray, cudnn_fa._fix_seqlen_offsets(  # pylint: disable=protected-access
      seqlen, seqlen, offsets, offsets, q, q))
  runs = [(r * t + s, k) for r, row in enumerate(SEG) for s, k in _runs(row)]
  want_cu = [s * n * h for s, _ in runs]
  want_cu += [b * t * n * h] * (cu.size - len(want_cu))
  np.testing.assert_array_equal(cu.ravel(), want_cu)
  np.testing.assert_array_equal(lens.ravel()[:len(runs)], [k for _, k in runs])
  assert not lens.ravel()[len(runs):].any()


@pytest.fixture
def h100(monkeypatch):
  """The installed cuDNN and GPU as an H100 with cuDNN 9.10 answers (module docstring)."""
  monkeypatch.setattr(cudnn_fa, "check_cudnn_version", lambda: 91000)
  monkeypatch.setattr(cudnn_fa, "check_compute_capability",
                      lambda c: tuple(map(int, c.split("."))) <= (9, 0))
  monkeypatch.setattr(cudnn_fa, "is_cuda_compute_capability_equal", lambda c: c == "9.0")


B, T, K, G, H = 2, 256, 2, 2, 32
ARGS = (jax.ShapeDtypeStruct((B, T, K, G, H), jnp.bfloat16),
        jax.ShapeDtypeStruct((B, T, K, H), jnp.bfloat16),
        jax.ShapeDtypeStruct((B, T, K, H), jnp.bfloat16), jax.ShapeDtypeStruct((B, T), jnp.int32))


def _cuda_text(attend, grad: bool) -> str:
  """``attend``'s loss (or its gradient in q, k, v), lowered for CUDA as a GPU would run it."""
  loss = lambda q, k, v, s: attend(q, k, v, s).astype(jnp.float32).sum()
  fn = jax.grad(loss, argnums=(0, 1, 2)) if grad else loss
  with backends.traced_for("gpu", lowering=True):
    return export.export(jax.jit(fn), platforms=["cuda"], disabled_checks=CHECKS)(
        *ARGS).mlir_module()


def _calls(text: str) -> dict[str, list[str]]:
  """custom_call target -> the operand types of each call to it."""
  out = {}
  for target, types in re.findall(r"custom_call @([\w$.]+)\(.*?\) \{.*?\} : \(([^)]*)\)", text):
    out.setdefault(target, []).append(types)
  return out


@pytest.mark.parametrize("grad", [False, True])
def test_cudnn_packed_lowers_for_cuda_with_the_packed_operands(h100, grad):
  text = _cuda_text(packed_attention.cudnn_packed_attention, grad)
  calls = _calls(text)
  assert set(calls) == ({CUDNN_FWD, CUDNN_BWD} if grad else {CUDNN_FWD}), set(calls)
  m = packed_attention.MAX_SEGMENTS
  for target, (types,) in calls.items():
    # q with K * G heads, k and v with their K heads (no repeat), the lengths [B, M]
    # and offsets [B, M + 1], query's and key's.
    assert types.startswith(f"tensor<{B}x{T}x{K * G}x{H}xbf16>, tensor<{B}x{T}x{K}x{H}xbf16>, "
                            f"tensor<{B}x{T}x{K}x{H}xbf16>"), (target, types)
    assert types.endswith(f"tensor<{B}x{m}xi32>, tensor<{B}x{m}xi32>, "
                          f"tensor<{B}x{m + 1}xi32>, tensor<{B}x{m + 1}xi32>"), (target, types)
  assert text.count(r"\22mask_type\22: \22PADDING_CAUSAL\22") == len(calls)
  assert text.count(rf"\22max_seg_per_batch\22: {m},") == len(calls)


def test_cudnn_packed_refuses_a_pre_hopper_gpu(h100, monkeypatch):
  """The same lowering with an A100's capability (8.0): JAX's own check refuses it."""
  monkeypatch.setattr(cudnn_fa, "check_compute_capability",
                      lambda c: tuple(map(int, c.split("."))) <= (8, 0))
  with pytest.raises(NotImplementedError, match="Hopper"):
    _cuda_text(packed_attention.cudnn_packed_attention, grad=False)


def test_pallas_gradient_lowers_for_cuda():
  """The kernel's Triton forward and backward, traced natively for a GPU (without its
  backward block sizes this raises 'Backward block sizes must all be set')."""
  attend = lambda q, k, v, s: attention_lib.packed_gpu_attention(q, k, v, s, kernel="pallas")
  text = _cuda_text(attend, grad=True)
  assert set(_calls(text)) == {TRITON}
  for kernel in ("mha_forward", "mha_preprocess_backward", "mha_backward"):
    assert f'"{kernel}"' in text or f"{kernel}" in text, kernel


def test_cudnn_packed_path_keeps_the_pallas_kernel_for_fuller_rows(h100):
  """'cudnn_packed' on a GPU: one program with both kernels, chosen per call by whether
  every row fits `MAX_SEGMENTS` sequences."""
  attend = lambda q, k, v, s: attention_lib.packed_gpu_attention(q, k, v, s,
                                                                 kernel="cudnn_packed")
  text = _cuda_text(attend, grad=True)
  assert set(_calls(text)) == {CUDNN_FWD, CUDNN_BWD, TRITON}
  assert "stablehlo.case" in text


def test_the_log_line_names_the_packed_kernel():
  """`describe_impl`'s line (the run's log) says which kernel packed rows run in."""
  line = attention_lib.describe_impl("auto", dtype=jnp.bfloat16, head_dim=128, length=6144,
                                     backend="gpu")
  assert line.startswith("cudnn ('auto' on gpu); packed rows: pallas")  # no GPU known here
  assert attention_lib.describe_packed(jnp.bfloat16, 128, capability="9.0").startswith(
      "cudnn_packed")
  assert "packed" not in attention_lib.describe_impl("auto", dtype=jnp.float32, head_dim=128,
                                                     length=6144, backend="tpu")


def test_a_decoder_names_the_kernel_its_packed_rows_run_in():
  """`Decoder.packed_attention`, which a run records in its metrics: the backend's
  choice for 'auto' (the door's on a GPU), an explicit implementation as set."""
  cfg = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=64, intermediate_size=48,
                    num_layers=1, num_heads=4, num_kv_heads=2, head_dim=32)
  model = init_model(cfg, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
  model.set_memory_options(attention="auto", attention_block=64)
  assert (model.packed_attention(64), model.packed_attention(65)) == ("dense", "blocked")
  with backends.traced_for("tpu"):
    assert model.packed_attention(6144) == "splash"
  with backends.traced_for("gpu", lowering=True):
    assert model.packed_attention(6144) == "pallas"  # no GPU known here
  with backends.traced_for("gpu", lowering=True, capability="9.0"):
    assert model.packed_attention(6144) == "cudnn_packed"
  model.set_memory_options(attention="blocked")
  with backends.traced_for("gpu"):
    assert model.packed_attention(6144) == "blocked"


@pytest.mark.parametrize("capability,want", [(None, {TRITON}),
                                             ("9.0", {CUDNN_FWD, CUDNN_BWD, TRITON})])
def test_a_decoders_gradient_over_packed_rows_lowers_for_cuda(h100, capability, want):
  """The update's path: a bf16 decoder (scanned, rematerialised layers, 'auto'
  attention) differentiated through `token_logprobs` of packed rows, lowered for a GPU
  whose capability is not known (the Pallas kernel) or named as an H100's (cuDNN's
  packed layout, the Pallas kernel beside it for fuller rows)."""
  cfg = ModelConfig(model_type="qwen3", vocab_size=61, hidden_size=64, intermediate_size=48,
                    num_layers=1, num_heads=4, num_kv_heads=2, head_dim=32, qk_norm=True)
  with backends.traced_for("gpu", lowering=True, capability=capability):
    model = init_model(cfg, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    model.set_memory_options(remat="full", scan_layers=True, attention="auto")
    graphdef, state = nnx.split(model)
    loss = lambda state, ids, seg: token_logprobs(nnx.merge(graphdef, state), ids, seg > 0,
                                                  segment_ids_BxT=seg).sum()
    ids = jax.ShapeDtypeStruct((2, 128), jnp.int32)
    text = export.export(jax.jit(jax.grad(loss)), platforms=["cuda"], disabled_checks=CHECKS)(
        state, ids, ids).mlir_module()
  assert set(_calls(text)) == want
