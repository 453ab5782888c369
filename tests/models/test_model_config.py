"""ModelConfig: reading transformers configs, presets, and the HF dict round trip."""

import json

import pytest
import transformers

from graft_jax.models import ModelConfig, UnsupportedConfigError


def test_reads_transformers5_defaults_for_each_family():
  qwen = ModelConfig.from_hf_config(transformers.Qwen3Config().to_dict())
  assert qwen.qk_norm and qwen.head_dim == 128 and qwen.rope_theta == 10000.0
  smol = ModelConfig.from_hf_config(transformers.SmolLM3Config().to_dict())
  assert smol.tie_word_embeddings and smol.rope_theta == 2_000_000.0
  assert smol.use_rope_layers[:4] == (1, 1, 1, 0) and sum(smol.use_rope_layers) == 27
  llama = ModelConfig.from_hf_config(transformers.LlamaConfig(
      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}).to_dict())
  assert llama.rope_type == "llama3" and llama.rope_factor == 32.0
  assert not llama.qk_norm and not llama.tie_word_embeddings


def test_reads_legacy_rope_scaling_layout():
  hf = ModelConfig.llama3p2_3b().to_hf_config()
  rope = hf.pop("rope_parameters")
  hf["rope_theta"] = rope.pop("rope_theta")
  hf["rope_scaling"] = rope
  assert ModelConfig.from_hf_config(hf) == ModelConfig.llama3p2_3b()


def test_smollm3_interval_without_explicit_layers():
  hf = ModelConfig.smollm3_3b().to_hf_config()
  del hf["no_rope_layers"]
  assert ModelConfig.from_hf_config(hf).use_rope_layers == ModelConfig.smollm3_3b(
  ).use_rope_layers


@pytest.mark.parametrize("preset", ["qwen3_1p7b", "smollm3_3b", "llama3p2_3b"])
def test_hf_dict_round_trip(preset):
  cfg = getattr(ModelConfig, preset)()
  assert ModelConfig.from_hf_config(cfg.to_hf_config()) == cfg


def test_transformers_accepts_our_dict():
  hf = transformers.AutoConfig.for_model(**ModelConfig.llama3p2_3b().to_hf_config())
  assert hf.rope_parameters["rope_type"] == "llama3"
  assert hf.num_key_value_heads == 8 and hf.tie_word_embeddings


def _read_back(folder, hf: dict):
  (folder / "config.json").write_text(json.dumps(hf))
  return transformers.AutoConfig.from_pretrained(folder)


@pytest.mark.parametrize("preset, theta, scaling", [
    ("smollm3_3b", 5e6, None), ("qwen3_1p7b", 1e6, None),
    ("llama3p2_3b", 5e5, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
])
def test_config_json_carries_both_rope_layouts(preset, theta, scaling, tmp_path):
  # A reader of either layout gets the model's theta, not transformers' 1e4 default.
  hf = getattr(ModelConfig, preset)().to_hf_config()
  assert hf["rope_theta"] == theta and hf["rope_scaling"] == scaling
  (tmp_path / "both").mkdir()
  read = _read_back(tmp_path / "both", hf)
  assert read.rope_parameters["rope_theta"] == theta
  # The pre-5 keys alone carry the same RoPE: transformers turns them into rope_parameters.
  (tmp_path / "legacy").mkdir()
  legacy = _read_back(tmp_path / "legacy", {k: v for k, v in hf.items() if k != "rope_parameters"})
  assert legacy.rope_parameters == read.rope_parameters


@pytest.mark.parametrize("bad, match", [
    ({"model_type": "gpt2"}, "unsupported model_type 'gpt2'"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type 'yarn'"),
    ({"attention_bias": True}, "attention_bias"),
])
def test_unsupported_configs_are_named(bad, match):
  hf = dict(ModelConfig.qwen3_1p7b().to_hf_config(), **bad)
  with pytest.raises(UnsupportedConfigError, match=match):
    ModelConfig.from_hf_config(hf)
