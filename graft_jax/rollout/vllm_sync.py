"""Weight sync to a vLLM sidecar: safetensors on disk, hot reload, and a log-prob probe.

The reload path writes the serving state dict as one safetensors file, streamed
tensor by tensor: each is cast to the serving dtype and laid out as Hugging
Face stores it *on the device* (one small jitted program per shape), fetched
in buckets of about ``bucket_bytes`` while the next bucket is being cast, and
written straight to the file, so the host holds one bucket, not the model.
Under a mesh that spans processes each tensor is gathered with
``process_allgather`` (``graft_jax.distributed.to_host``) and process 0 writes.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import struct
import time

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from graft_jax import distributed
from graft_jax.models import hf_keys, layer_storage, token_logprobs_jit

_SAVE_DTYPES = {"bfloat16": jnp.bfloat16, "float16": jnp.float16, "float32": jnp.float32,
                "auto": None}
_SAFETENSORS_DTYPES = {np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.float16): "F16",
                       np.dtype(np.float32): "F32"}
_LAYOUTS = {layout.name: layout for _, _, layout in hf_keys.KEY_TABLE}
BUCKET_BYTES = 256 << 20
TIED_HEAD = ("lm_head.weight", "model.embed_tokens.weight")  # (served copy, its source)


@functools.partial(jax.jit, static_argnames=("layout", "dtype"))
def to_serving(x, *, layout: str, dtype):
  """One parameter in the server's dtype and Hugging Face layout, computed on its device."""
  return _LAYOUTS[layout].to_hf(x.astype(dtype), x.shape)


def serving_plan(model, dtype: str = "auto") -> list[tuple[str, str, jax.Array, tuple, np.dtype]]:
  """``(hf_key, layout, parameter, hf_shape, served dtype)`` per tensor, each parameter once;
  a tied embedding is listed once (``write_weights`` adds the head's copy)."""
  out = []
  for path, value in layer_storage.per_layer_params(model):
    key, layout = hf_keys.nnx_to_hf(path)
    served = np.dtype(_SAVE_DTYPES[dtype] or value.dtype)
    out.append((key, layout.name, value, layout.hf_shape(value.shape), served))
  return out


def _header(entries, metadata) -> bytes:
  header, offset = {"__metadata__": metadata}, 0
  for key, shape, dt in entries:
    size = int(np.prod(shape)) * dt.itemsize
    header[key] = {"dtype": _SAFETENSORS_DTYPES[dt], "shape": list(shape),
                   "data_offsets": [offset, offset + size]}
    offset += size
  raw = json.dumps(header, separators=(",", ":")).encode()
  raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
  return struct.pack("<Q", len(raw)) + raw


def _create(path: pathlib.Path):
  """``path`` opened to write, new or emptied, readable by this user alone; a link there is
  refused (ELOOP), not followed to a file someone else chose."""
  return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600),
                   "wb")


def write_weights(model, out_dir: str | os.PathLike, dtype: str = "auto", *,
                  bucket_bytes: int = BUCKET_BYTES, untie: bool = True) -> dict[str, float]:
  """Writes config.json and the full state dict as one safetensors file (no tokenizer);
  returns ``{"bytes": ..., "fetch_s": ..., "write_s": ...}``.

  The whole state dict every time: vLLM fuses q/k/v (and gate/up) on load,
  so a partial file would leave the fused tensors half updated. Tied
  embeddings are served untied (an explicit `lm_head.weight`): vLLM's in-place
  reload does not refresh a tied LM head (seen on the CPU build, where the
  head keeps a repacked copy), while an untied one is loaded like any weight.
  The embedding is cast and fetched once; its bytes are written twice.
  ``untie=False`` keeps a tied model tied (no head in the file): for a server
  whose later weights arrive by push (`graft_jax.rollout.weight_transfer`),
  where the head shares the embedding's storage and the embedding is sent once.
  """
  out = pathlib.Path(out_dir)
  plan = serving_plan(model, dtype)
  entries = [(key, shape, dt) for key, _, _, shape, dt in plan]
  tied = model.cfg.tie_word_embeddings and untie
  if tied:
    source = next(e for e in entries if e[0] == TIED_HEAD[1])
    entries.append((TIED_HEAD[0],) + source[1:])
  writer = distributed.is_writer()
  stats = {"bytes": 0, "fetch_s": 0.0, "write_s": 0.0}
  tmp = out / "model.safetensors.partial"
  f = None
  if writer:
    out.mkdir(parents=True, exist_ok=True)
    f = _create(tmp)
  try:
    if f is not None:
      f.write(_header(entries, {"format": "pt"}))
    kept = None
    buckets = _buckets(plan, bucket_bytes)
    while True:
      t0 = time.perf_counter()  # the casts run inside the generator: timed with the fetch
      bucket = next(buckets, None)
      if bucket is None:
        break
      host = [(key, distributed.to_host(x)) for key, x in bucket]
      stats["fetch_s"] += time.perf_counter() - t0
      t0 = time.perf_counter()
      for key, array in host:
        if key == TIED_HEAD[1] and tied:
          kept = array
        if f is not None:
          f.write(_raw(array))
        stats["bytes"] += array.nbytes
      stats["write_s"] += time.perf_counter() - t0
    if tied and f is not None:
      f.write(_raw(kept))
      stats["bytes"] += kept.nbytes
  finally:
    if f is not None:
      f.close()
  if writer:
    # Renamed into place, so a server restarted meanwhile never reads half a file.
    os.replace(tmp, out / "model.safetensors")
    saved = entries[0][2]
    config = model.cfg.to_hf_config(
        dtype="bfloat16" if saved == ml_dtypes.bfloat16 else str(saved))
    if tied:
      config["tie_word_embeddings"] = False
    with _create(out / "config.json.partial") as f:
      f.write(json.dumps(config, indent=2).encode())
    os.replace(out / "config.json.partial", out / "config.json")
  return stats


def _raw(array: np.ndarray) -> np.ndarray:
  """The array's bytes in C order (bfloat16 has no buffer-protocol format: viewed as bytes)."""
  return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _buckets(plan, bucket_bytes: int):
  """Yields lists of ``(key, served array)`` of about ``bucket_bytes``; the next bucket's
  casts are dispatched before the current one is handed over, so they overlap its fetch
  and write."""
  pending, size, groups = [], 0, []
  for key, layout, value, shape, dt in plan:
    pending.append((key, layout, value, dt))
    size += int(np.prod(shape)) * dt.itemsize
    if size >= bucket_bytes:
      groups.append(pending)
      pending, size = [], 0
  if pending:
    groups.append(pending)
  launch = lambda g: [(key, to_serving(v, layout=layout, dtype=dt)) for key, layout, v, dt in g]
  current = launch(groups[0]) if groups else []
  for i in range(len(groups)):
    following = launch(groups[i + 1]) if i + 1 < len(groups) else []
    yield current
    current = following


def reload_weights(sidecar, weights_dir, *, timeout: float = 600.0) -> None:
  """Loads `weights_dir` into the running server, then drops its prefix cache.

  Without the reset, cached prefixes keep keys/values of the old weights.
  """
  sidecar.post("/collective_rpc", {"method": "reload_weights",
                                   "kwargs": {"weights_path": str(weights_dir)}}, timeout=timeout)
  for _ in range(50):
    # The reset fails while blocks are held by running requests; none should be.
    if (sidecar.post("/reset_prefix_cache", timeout=60.0) or {}).get("success", True):
      return
    time.sleep(0.1)
  raise RuntimeError(f"{sidecar.name}: /reset_prefix_cache kept failing")


def probe_ids(vocab_size: int, length: int = 32, seed: int = 0) -> list[int]:
  """A fixed token sequence for the sync check (same every call)."""
  return np.random.default_rng(seed).integers(0, vocab_size, size=length).tolist()


def jax_probe_logprobs(model, ids) -> np.ndarray:
  """log softmax(logits)[ids[t]] at t = 1..len-1 under the JAX model, float64."""
  ids_1xT = np.asarray([ids], np.int32)
  logp = token_logprobs_jit(model, ids_1xT, np.ones_like(ids_1xT, bool))
  return np.asarray(distributed.to_host(logp), np.float64)[0, 1:]


def vllm_probe_logprobs(sidecar, ids, *, timeout: float) -> np.ndarray:
  """The server's prompt log-probs of the same tokens (always before temperature).
  ``timeout``: the engine's limit for one request; a fresh server's first request
  (this one) also pays its first-request warm-up."""
  out = sidecar.post("/v1/completions", {
      "model": sidecar.name, "prompt": list(ids), "max_tokens": 1, "temperature": 0.0,
      "prompt_logprobs": 0, "return_tokens_as_token_ids": True}, timeout=timeout)
  entries = out["choices"][0]["prompt_logprobs"][1:]
  return np.array([entry[str(t)]["logprob"] for entry, t in zip(entries, ids[1:])], np.float64)


def probe_gap(sidecar, expected_logp, ids, *, timeout: float) -> tuple[float, float]:
  """(mean, max) |vLLM - JAX| prompt log-prob over the probe's tokens; ``expected_logp`` is
  `jax_probe_logprobs` of the weights the server should hold (computed once per sync)."""
  gap = np.abs(vllm_probe_logprobs(sidecar, ids, timeout=timeout) - expected_logp)
  return float(gap.mean()), float(gap.max())
