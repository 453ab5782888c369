"""The toy pair build: HF folders the shared loaders and transformers read, cached by key."""

import dataclasses
import json

import numpy as np
import pytest
import torch
import transformers

from graft_jax import toy
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.toy import pair as pair_lib
from graft_jax.toy.pair import FOLDERS, ensure_toy_pair

pytestmark = pytest.mark.slow  # each build compiles two train steps (~10-20 s)


def test_folders_load_with_graft_and_transformers_alike(tiny_pair):
  cfg = toy.tiny_config()
  for folder, spec in zip((tiny_pair.model_a, tiny_pair.model_b), (cfg.model_a, cfg.model_b)):
    model, model_cfg = load_hf(folder)
    tok = load_tokenizer(folder)
    assert model_cfg.model_type == spec.model_type
    assert model_cfg.vocab_size == len(tok)
    assert model_cfg.eos_token_ids == (tok.eos_token_id,)
    text = "Compute 47+38." + toy.PROMPT_SUFFIX + " 47+38=85. \\boxed{85}"
    ids = np.array([tok.encode(text, add_special_tokens=False)])
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
      want = hf(torch.tensor(ids).long()).logits.float().numpy()
    np.testing.assert_allclose(np.asarray(model(ids)), want, rtol=1e-4, atol=1e-4)
  b_cfg = json.loads((tiny_pair.model_b / "config.json").read_text())
  assert b_cfg["model_type"] == "smollm3" and 0 in b_cfg["no_rope_layers"]


def test_cached_build_is_reused_without_training(tiny_pair, monkeypatch):
  def fail(*args, **kwargs):
    raise AssertionError("a cached pair must not be trained again")

  monkeypatch.setattr(pair_lib, "train_sft", fail)
  again = ensure_toy_pair(tiny_pair.root, toy.tiny_config(), evaluate=False)
  assert not again.built and again.key == tiny_pair.key
  assert again.record == tiny_pair.record


def test_changed_recipe_changes_the_key():
  cfg = toy.tiny_config()
  steps = dataclasses.replace(cfg.model_a.sft, steps=cfg.model_a.sft.steps + 1)
  changed = dataclasses.replace(cfg, model_a=dataclasses.replace(cfg.model_a, sft=steps))
  assert toy.cache_key(changed) != toy.cache_key(cfg)
  assert toy.cache_key(toy.tiny_config(seed=1)) != toy.cache_key(cfg)
  assert toy.cache_key(toy.tiny_config()) == toy.cache_key(cfg)


def test_same_seed_builds_identical_files(tiny_pair, tmp_path):
  again = ensure_toy_pair(tmp_path / "pair", toy.tiny_config(), evaluate=False)
  assert again.built
  for folder in FOLDERS:
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
      assert ((tiny_pair.root / folder / name).read_bytes()
              == (again.root / folder / name).read_bytes()), (folder, name)


def test_pass_rate_table_runs_on_the_real_sampler_and_reward(tiny_pair):
  from graft_jax.toy.skill_table import format_table, pass_rate_table

  cfg = toy.tiny_config()
  table = pass_rate_table([tiny_pair.model_a, tiny_pair.model_b], cfg)
  print(format_table(table, [g for g, _ in cfg.groups]))  # untrained: about 0
  assert set(table) == {cfg.model_a.name, cfg.model_b.name}
  for row in table.values():
    assert all(0.0 <= row[g] <= 1.0 for g, _ in cfg.groups)
