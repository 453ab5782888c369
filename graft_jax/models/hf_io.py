"""Load and save Hugging Face checkpoint folders (config.json + safetensors).

`load_hf` reads `model.safetensors` or the shards listed in
`model.safetensors.index.json` of a folder, or of a Hub id's snapshot in the Hugging Face
cache (`graft_jax.models.hub`); `save_hf` writes a folder that
`transformers.AutoModelForCausalLM.from_pretrained` opens with the same logits.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx
from safetensors import safe_open
from safetensors.numpy import save_file

from graft_jax import distributed
from graft_jax.models import hf_keys, hub, layer_storage
from graft_jax.models.config import ModelConfig, UnsupportedConfigError
from graft_jax.models.decoder import Decoder

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(ValueError):
  """A checkpoint folder does not match the decoder it describes."""


def read_config(path: str | os.PathLike) -> ModelConfig:
  config_path = Path(hub.resolve(str(path)).folder) / "config.json"
  if not config_path.is_file():
    raise CheckpointError(f"{config_path}: no config.json in the checkpoint folder")
  try:
    return ModelConfig.from_hf_config(json.loads(config_path.read_text()))
  except UnsupportedConfigError as e:
    raise UnsupportedConfigError(f"{config_path}: {e}") from None
  except KeyError as e:
    raise CheckpointError(f"{config_path}: missing field {e}") from None


def _weight_files(path: Path) -> dict[str, list[str]]:
  """Safetensors file name -> the keys it holds (from the index when sharded)."""
  index = path / INDEX_FILE
  if index.is_file():
    files: dict[str, list[str]] = {}
    for key, name in json.loads(index.read_text())["weight_map"].items():
      files.setdefault(name, []).append(key)
    for name in files:
      if not (path / name).is_file():
        raise CheckpointError(f"{index}: lists shard {name!r}, which is missing")
    return files
  single = path / SINGLE_FILE
  if not single.is_file():
    raise CheckpointError(f"{path}: neither {SINGLE_FILE} nor {INDEX_FILE} found")
  with safe_open(single, "numpy") as f:
    return {SINGLE_FILE: list(f.keys())}


def _path_str(path: tuple) -> str:
  return ".".join(str(p) for p in path)


def load_hf(path: str | os.PathLike, *, dtype=jnp.float32, compute_dtype=None, mesh=None
            ) -> tuple[Decoder, ModelConfig]:
  """Builds a `Decoder` from an HF folder or Hub id; params are stored in `dtype`.

  With a `mesh`, each tensor goes from the file straight to its shards on the
  mesh (`graft_jax.sharding.state_shardings`): no device ever holds the whole
  model. Raises CheckpointError naming the file and key for a missing key, an
  unexpected key or a wrong shape, and UnsupportedConfigError for a
  model_type or option these decoders do not implement.
  """
  path = Path(hub.resolve(str(path)).folder)  # a Hub id: its cached snapshot
  cfg = read_config(path)
  abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0), param_dtype=dtype,
                                            dtype=compute_dtype))
  graphdef, state = nnx.split(abstract)
  flat = {_path_str(p): v for p, v in nnx.to_flat_state(state)}
  placement = {}
  if mesh is not None:
    from graft_jax.sharding import state_shardings  # sharding imports the models
    placement = {_path_str(p): v.get_value()
                 for p, v in nnx.to_flat_state(state_shardings(state, mesh))}
  loaded: set[str] = set()
  for name, keys in _weight_files(path).items():
    with safe_open(path / name, "numpy") as f:
      for key in keys:
        _load_tensor(f, path / name, key, flat, loaded, cfg, dtype, placement)
  missing = sorted(set(flat) - loaded)
  if missing:
    hf_missing = [hf_keys.nnx_to_hf(p)[0] for p in missing]
    raise CheckpointError(f"{path}: missing key(s) {hf_missing} in the safetensors files")
  return nnx.merge(graphdef, state), cfg


def _load_tensor(f, file: Path, key: str, flat: dict, loaded: set, cfg: ModelConfig, dtype,
                 placement: dict):
  if hf_keys.IGNORED_HF_KEYS.match(key):
    return
  # A tied checkpoint may still carry a copy of the embedding as lm_head; the
  # embedding is the one we keep (as transformers does).
  if key == "lm_head.weight" and cfg.tie_word_embeddings:
    return
  match = hf_keys.hf_to_nnx(key)
  if match is None or match[0] not in flat:
    raise CheckpointError(f"{file}: unexpected key {key!r} for a {cfg.model_type} model "
                          f"(tie_word_embeddings={cfg.tie_word_embeddings}, "
                          f"num_layers={cfg.num_layers})")
  nnx_path, layout = match
  variable = flat[nnx_path]
  shape = variable.get_value().shape
  want = layout.hf_shape(shape)
  got = tuple(f.get_slice(key).get_shape())
  if got != want:
    raise CheckpointError(f"{file}: key {key!r} has shape {got}, expected {want} "
                          f"from config.json")
  value = layout.to_nnx(f.get_tensor(key), shape)
  if nnx_path in placement:
    host = np.asarray(value).astype(jnp.dtype(dtype))
    value = jax.make_array_from_callback(shape, placement[nnx_path], lambda idx: host[idx])
  else:
    value = jnp.asarray(value, dtype=dtype)
  variable.set_value(value)
  loaded.add(nnx_path)


def hf_tensors(model: Decoder, *, dtype=None) -> dict[str, np.ndarray]:
  """The model's parameters as HF-named host arrays (optionally cast)."""
  out = {}
  for path, value in layer_storage.per_layer_params(model):
    key, layout = hf_keys.nnx_to_hf(path)
    # Gathered from every process when the mesh spans several (never device_get of
    # an array this process cannot address).
    array = distributed.to_host(value)
    if dtype is not None:
      array = array.astype(np.dtype(dtype))
    out[key] = np.ascontiguousarray(layout.to_hf(array, array.shape))
  return out


def save_hf(model: Decoder, config: ModelConfig, tokenizer, out_dir: str | os.PathLike, *,
            dtype=None, max_shard_bytes: int = 5 * 2**30) -> Path:
  """Writes config.json, safetensors (sharded with an index past `max_shard_bytes`)
  and, when `tokenizer` is not None, its files via `save_pretrained`.

  `dtype` (e.g. jnp.bfloat16) casts the saved weights; default: as stored.
  Collective under several processes: each gathers the weights it does not hold,
  process 0 alone writes, and all return once the folder is complete.
  """
  out = Path(out_dir)
  tensors = hf_tensors(model, dtype=dtype)
  if distributed.is_writer():
    _write_folder(tensors, config, tokenizer, out, max_shard_bytes)
  distributed.sync("save_hf")
  return out


def _write_folder(tensors: dict, config: ModelConfig, tokenizer, out: Path,
                  max_shard_bytes: int) -> None:
  out.mkdir(parents=True, exist_ok=True)
  # Keys in table order, so shards hold whole layers in sequence.
  shards: list[dict[str, np.ndarray]] = [{}]
  size = 0
  for key, array in tensors.items():
    if shards[-1] and size + array.nbytes > max_shard_bytes:
      shards.append({})
      size = 0
    shards[-1][key] = array
    size += array.nbytes
  for stale in list(out.glob("model*.safetensors")) + [out / INDEX_FILE]:
    stale.unlink(missing_ok=True)
  if len(shards) == 1:
    save_file(shards[0], out / SINGLE_FILE, metadata={"format": "pt"})
  else:
    weight_map = {}
    for i, shard in enumerate(shards):
      name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
      save_file(shard, out / name, metadata={"format": "pt"})
      weight_map.update({key: name for key in shard})
    total = sum(a.nbytes for a in tensors.values())
    (out / INDEX_FILE).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
  saved_dtype = next(iter(tensors.values())).dtype
  dtype_name = "bfloat16" if saved_dtype == ml_dtypes.bfloat16 else str(saved_dtype)
  (out / "config.json").write_text(json.dumps(config.to_hf_config(dtype=dtype_name),
                                              indent=2))
  if tokenizer is not None:
    tokenizer.save_pretrained(str(out))
