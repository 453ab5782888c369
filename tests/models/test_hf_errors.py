"""Bad checkpoints fail with errors that name the file and the key."""

import json

import numpy as np
import pytest
import tiny_hf
from safetensors.numpy import load_file, save_file

from graft_jax.models import CheckpointError, UnsupportedConfigError, load_hf


@pytest.fixture
def folder(tmp_path):
  tiny_hf.save_hf_model("qwen3", tmp_path)
  return tmp_path


def _edit_tensors(folder, fn):
  tensors = load_file(folder / "model.safetensors")
  fn(tensors)
  save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def test_missing_key(folder):
  _edit_tensors(folder, lambda t: t.pop("model.layers.1.self_attn.k_norm.weight"))
  with pytest.raises(CheckpointError, match=r"missing key.*model\.layers\.1\.self_attn\.k_norm"):
    load_hf(folder)


def test_unexpected_key(folder):
  _edit_tensors(folder, lambda t: t.update({"model.layers.7.mlp.up_proj.weight": np.zeros(
      (96, 64), np.float32)}))
  with pytest.raises(CheckpointError, match=r"model\.safetensors: unexpected key "
                                            r"'model\.layers\.7\.mlp\.up_proj\.weight'"):
    load_hf(folder)


def test_wrong_shape(folder):
  def shrink(t):
    t["model.layers.0.mlp.down_proj.weight"] = t["model.layers.0.mlp.down_proj.weight"][:, :50]
  _edit_tensors(folder, shrink)
  with pytest.raises(CheckpointError, match=r"model\.safetensors: key 'model\.layers\.0\.mlp"
                                            r"\.down_proj\.weight' has shape \(64, 50\), "
                                            r"expected \(64, 96\)"):
    load_hf(folder)


def test_unknown_model_type(folder):
  cfg = json.loads((folder / "config.json").read_text())
  cfg["model_type"] = "mamba"
  (folder / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(UnsupportedConfigError, match=r"config\.json: unsupported model_type "
                                                   r"'mamba'"):
    load_hf(folder)


def test_missing_weights_and_shards(folder):
  (folder / "model.safetensors").unlink()
  with pytest.raises(CheckpointError, match="neither model.safetensors nor"):
    load_hf(folder)
  (folder / "model.safetensors.index.json").write_text(json.dumps(
      {"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}))
  with pytest.raises(CheckpointError, match="model-00001-of-00002.safetensors.*missing"):
    load_hf(folder)


def test_missing_config(tmp_path):
  with pytest.raises(CheckpointError, match="no config.json"):
    load_hf(tmp_path)
