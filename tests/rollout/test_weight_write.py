"""The reload path's safetensors writer: every tensor as the source checkpoint holds it, cast like
NumPy casts, in any bucket size, and a folder transformers opens with the source's logits."""

import json

import ml_dtypes
import numpy as np
import pytest
import tiny_hf
import transformers
from safetensors.numpy import load_file

from graft_jax.models import load_hf
from graft_jax.rollout import vllm_sync


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_written_tensors_equal_the_checkpoint_cast_by_numpy(ckpt, tmp_path, dtype):
  model, cfg = load_hf(ckpt.path)
  stats = vllm_sync.write_weights(model, tmp_path, dtype)
  want = load_file(ckpt.path / "model.safetensors")
  got = load_file(tmp_path / "model.safetensors")
  if cfg.tie_word_embeddings:  # served untied: the head is the embedding, written again
    assert "lm_head.weight" not in want
    want["lm_head.weight"] = want["model.embed_tokens.weight"]
  assert got.keys() == want.keys()
  cast = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
  for key, w in want.items():
    assert got[key].dtype == cast, key
    np.testing.assert_array_equal(got[key], w.astype(np.float32).astype(cast), err_msg=key)
  assert stats["bytes"] == sum(x.nbytes for x in got.values())
  config = json.loads((tmp_path / "config.json").read_text())
  assert config["tie_word_embeddings"] is False
  assert config["torch_dtype" if "torch_dtype" in config else "dtype"] == dtype


def test_the_pushed_config_reads_the_sources_rope_in_either_layout(ckpt, tmp_path):
  model, _ = load_hf(ckpt.path)
  vllm_sync.write_weights(model, tmp_path / "push", "bfloat16")
  source = transformers.AutoConfig.from_pretrained(ckpt.path).rope_parameters
  assert transformers.AutoConfig.from_pretrained(tmp_path / "push").rope_parameters == source
  config = json.loads((tmp_path / "push" / "config.json").read_text())
  assert config["rope_theta"] == source["rope_theta"]  # for a transformers that reads this key
  del config["rope_parameters"]
  (tmp_path / "legacy").mkdir()
  (tmp_path / "legacy" / "config.json").write_text(json.dumps(config))
  assert transformers.AutoConfig.from_pretrained(tmp_path / "legacy").rope_parameters == source


def test_bucket_size_changes_nothing(ckpt, tmp_path):
  model, _ = load_hf(ckpt.path)
  vllm_sync.write_weights(model, tmp_path / "one_per_tensor", "bfloat16", bucket_bytes=1)
  vllm_sync.write_weights(model, tmp_path / "all_at_once", "bfloat16", bucket_bytes=1 << 40)
  assert ((tmp_path / "one_per_tensor" / "model.safetensors").read_bytes()
          == (tmp_path / "all_at_once" / "model.safetensors").read_bytes())


def test_transformers_opens_the_served_folder_with_the_same_logits(ckpt, tmp_path):
  model, _ = load_hf(ckpt.path)
  vllm_sync.write_weights(model, tmp_path, "float32")
  served = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
  ids = tiny_hf.random_ids(2, 40, seed=5)
  np.testing.assert_array_equal(tiny_hf.hf_logits(served, ids), tiny_hf.hf_logits(ckpt.hf_model, ids))


def test_a_model_with_stacked_blocks_serves_the_same_bytes(ckpt, tmp_path):
  model, _ = load_hf(ckpt.path)
  vllm_sync.write_weights(model, tmp_path / "per_layer", "bfloat16")
  model.set_memory_options(scan_layers=True)  # blocks stored on a layer axis
  assert model.stacks is not None
  vllm_sync.write_weights(model, tmp_path / "stacked", "bfloat16")
  assert ((tmp_path / "stacked" / "model.safetensors").read_bytes()
          == (tmp_path / "per_layer" / "model.safetensors").read_bytes())


def test_a_push_servers_first_checkpoint_stays_tied(ckpt, tmp_path):
  """A server whose later weights arrive by push starts from a tied checkpoint, so its head
  shares the embedding's storage and every push sends the embedding once."""
  model, cfg = load_hf(ckpt.path)
  vllm_sync.write_weights(model, tmp_path, "float32", untie=False)
  want = load_file(ckpt.path / "model.safetensors")
  got = load_file(tmp_path / "model.safetensors")
  assert got.keys() == want.keys()  # no lm_head.weight added to a tied model
  for key, w in want.items():
    np.testing.assert_array_equal(got[key], w.astype(np.float32), err_msg=key)
  config = json.loads((tmp_path / "config.json").read_text())
  assert config["tie_word_embeddings"] is cfg.tie_word_embeddings
  served = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
  ids = tiny_hf.random_ids(2, 40, seed=5)
  np.testing.assert_array_equal(tiny_hf.hf_logits(served, ids), tiny_hf.hf_logits(ckpt.hf_model, ids))
