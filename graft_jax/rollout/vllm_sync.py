"""Weight sync to a vLLM sidecar: safetensors on disk, hot reload, and a log-prob probe."""

from __future__ import annotations

import json
import os
import pathlib
import time

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from graft_jax.models import token_logprobs_jit
from graft_jax.models.hf_io import hf_tensors

_SAVE_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32,
                "auto": None}


def write_weights(model, out_dir: str | os.PathLike, dtype: str = "auto") -> None:
  """Writes config.json and the full state dict as one safetensors file (no tokenizer).

  The whole state dict every time: vLLM fuses q/k/v (and gate/up) on load,
  so a partial file would leave the fused tensors half updated. Tied
  embeddings are served untied (an explicit `lm_head.weight`): vLLM's in-place
  reload does not refresh a tied LM head (seen on the CPU build, where the
  head keeps a repacked copy), while an untied one is loaded like any weight.
  """
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  tensors = hf_tensors(model, dtype=_SAVE_DTYPES[dtype])
  saved = next(iter(tensors.values())).dtype
  config = model.cfg.to_hf_config(
      dtype="bfloat16" if saved == ml_dtypes.bfloat16 else str(saved))
  if model.cfg.tie_word_embeddings:
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    config["tie_word_embeddings"] = False
  # Written aside and renamed, so a server restarted meanwhile never reads half a file.
  tmp = out / "model.safetensors.partial"
  save_file(tensors, tmp, metadata={"format": "pt"})
  os.replace(tmp, out / "model.safetensors")
  (out / "config.json").write_text(json.dumps(config, indent=2))


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
  return np.asarray(logp, np.float64)[0, 1:]


def vllm_probe_logprobs(sidecar, ids, *, timeout: float = 120.0) -> np.ndarray:
  """The server's prompt log-probs of the same tokens (always before temperature)."""
  out = sidecar.post("/v1/completions", {
      "model": sidecar.name, "prompt": list(ids), "max_tokens": 1, "temperature": 0.0,
      "prompt_logprobs": 0, "return_tokens_as_token_ids": True}, timeout=timeout)
  entries = out["choices"][0]["prompt_logprobs"][1:]
  return np.array([entry[str(t)]["logprob"] for entry, t in zip(entries, ids[1:])], np.float64)


def probe_gap(sidecar, model, ids) -> tuple[float, float]:
  """(mean, max) |vLLM - JAX| prompt log-prob over the probe's tokens."""
  gap = np.abs(vllm_probe_logprobs(sidecar, ids) - jax_probe_logprobs(model, ids))
  return float(gap.mean()), float(gap.max())
