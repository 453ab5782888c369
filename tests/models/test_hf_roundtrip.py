"""save_hf writes folders transformers opens with the same logits; load∘save is identity."""

import json

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch
import tiny_hf
import transformers
from flax import nnx

from graft_jax.models import load_hf, load_tokenizer, save_hf


def _params(model):
  return {".".join(map(str, p)): np.asarray(v.get_value())
          for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def test_transformers_loads_saved_folder_with_same_logits(ckpt, tmp_path):
  model, cfg = load_hf(ckpt.path)
  tok = load_tokenizer(ckpt.path)
  save_hf(model, cfg, tok, tmp_path)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
  assert type(reloaded) is type(ckpt.hf_model)
  ids = tiny_hf.random_ids(2, 72, seed=3)
  np.testing.assert_array_equal(tiny_hf.hf_logits(reloaded, ids),
                                tiny_hf.hf_logits(ckpt.hf_model, ids))
  assert transformers.AutoTokenizer.from_pretrained(tmp_path).eos_token == "</s>"


def test_load_save_load_is_identity(ckpt, tmp_path):
  model, cfg = load_hf(ckpt.path)
  save_hf(model, cfg, None, tmp_path)
  again, cfg2 = load_hf(tmp_path)
  assert cfg2 == cfg
  first, second = _params(model), _params(again)
  assert first.keys() == second.keys()
  for k in first:
    np.testing.assert_array_equal(first[k], second[k], err_msg=k)


def test_saved_tensors_equal_the_source_checkpoint(ckpt, tmp_path):
  model, cfg = load_hf(ckpt.path)
  save_hf(model, cfg, None, tmp_path)
  from safetensors.numpy import load_file
  want = load_file(ckpt.path / "model.safetensors")
  got = load_file(tmp_path / "model.safetensors")
  assert got.keys() == want.keys()
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_sharded_save_round_trips_through_the_index(ckpt_root, tmp_path):
  ckpt = tiny_hf.checkpoint("smollm3", ckpt_root)
  model, cfg = load_hf(ckpt.path)
  save_hf(model, cfg, None, tmp_path / "out", max_shard_bytes=20_000)
  index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
  assert len(set(index["weight_map"].values())) > 2
  again, _ = load_hf(tmp_path / "out")
  ids = tiny_hf.random_ids(1, 40)
  np.testing.assert_array_equal(np.asarray(again(ids)), np.asarray(model(ids)))
  hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
  np.testing.assert_array_equal(tiny_hf.hf_logits(hf, ids), tiny_hf.hf_logits(ckpt.hf_model, ids))


def test_bf16_save_opens_in_transformers_as_bf16(ckpt_root, tmp_path):
  ckpt = tiny_hf.checkpoint("qwen3", ckpt_root)
  model, cfg = load_hf(ckpt.path)
  save_hf(model, cfg, None, tmp_path / "out", dtype=ml_dtypes.bfloat16)
  assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "bfloat16"
  hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype="auto")
  assert hf.model.embed_tokens.weight.dtype == torch.bfloat16
  bf16, _ = load_hf(tmp_path / "out", dtype=jnp.bfloat16)
  assert bf16.embedding_VxD.get_value().dtype == jnp.bfloat16
