"""The pair plan's device shares: the trainer's JAX fraction and each vLLM server's budget."""

import pytest

from graft_jax.plan import run as run_plan
from graft_jax.config import run_config as config_lib
from graft_jax.config import load as config_load


def _qwen3_1p7b_params_by_hand() -> int:
  # Qwen3-1.7B's published shapes: vocab 151,936, hidden 2,048, 28 layers, 16 query and
  # 8 KV heads of 128, MLP 6,144, q/k RMSNorm over the head, tied embeddings.
  h, hd, layers = 2048, 128, 28
  attn = h * 16 * hd + 2 * h * 8 * hd + 16 * hd * h + 2 * hd  # q, k, v, o, q/k norms
  mlp = 3 * h * 6144
  return 151936 * h + layers * (attn + mlp + 2 * h) + h  # + 2 layer norms each, final norm


def _cfg(**fields):
  """The SmolLM3 / Qwen3 pair config with ``a__b=v`` setting field ``a.b``."""
  cd = config_lib.load_config("configs/pair_smollm3_qwen3.py:graft")
  with cd.unlocked():
    for k, v in fields.items():
      config_load.set_field(cd, k.replace("__", "."), v)
  return config_lib.from_config_dict(cd)


def test_parameter_count_matches_the_published_shapes():
  got = run_plan.num_params(run_plan.PRESETS["qwen3_1p7b"]())
  assert got == _qwen3_1p7b_params_by_hand() == 1_720_574_976


def test_trainer_share_comes_from_the_placement_unless_set():
  assert run_plan.trainer_fraction(_cfg()) == 0.9  # the JAX engine: GPUs of its own
  assert run_plan.trainer_fraction(_cfg(xla_mem_fraction=0.5)) == 0.5
  # A server beside the trainer on each GPU: what it leaves, less the 0.05 headroom.
  cfg = _cfg(engine="vllm", vllm__gpus__model_a=(0,), vllm__gpus__model_b=(1,),
             vllm__gpu_memory_utilization=0.3, vllm__weight_sync="reload")
  assert run_plan.trainer_fraction(cfg) == pytest.approx(0.65)


def test_vllm_server_budgets_subtract_serving_weights():
  assert run_plan.server_budgets(_cfg(), 141 * 10**9) == []  # the JAX engine: no servers
  # Servers on GPUs 0-1 and 2, the trainer on GPU 3 (no shared GPU, so no split needed).
  cfg = _cfg(engine="vllm", jax_devices=(3,), vllm__gpus__model_a=(0, 1),
             vllm__gpus__model_b=(2,), vllm__gpu_memory_utilization=0.5, vllm__dtype="bfloat16")
  a, b = run_plan.server_budgets(cfg, 100 * 10**9)
  assert (a["gpus"], a["share"]) == ((0, 1), 100 * 10**9)
  assert (b["gpus"], b["share"]) == ((2,), 50 * 10**9)
  qwen = next(s for s in (a, b) if s["name"] == cfg.model_b.name)
  assert cfg.model_b.name == "qwen3_1p7b"
  assert qwen["weights"] == 2 * _qwen3_1p7b_params_by_hand()
  assert qwen["kv"] == qwen["share"] - qwen["weights"] and qwen["fits"]
  tiny = run_plan.server_budgets(cfg, 6 * 10**9)  # 3 GB for 3.4 GB of bf16 weights
  assert not next(s for s in tiny if s["name"] == "qwen3_1p7b")["fits"]
  assert "NO ROOM" in run_plan.format_servers(tiny)


@pytest.mark.slow  # six compiles of a narrow model's update
def test_plan_of_three_models_counts_every_other_models_state(tmp_path):
  import dataclasses
  import json

  import jax

  from configs import base
  from graft_jax.models.config import ModelConfig

  narrow = ModelConfig(model_type="qwen3", vocab_size=128, hidden_size=64, intermediate_size=128,
                       num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True)
  models = []
  for name, width in (("a", 64), ("b", 96), ("c", 128)):
    (tmp_path / name).mkdir()
    mc = dataclasses.replace(narrow, hidden_size=width)
    (tmp_path / name / "config.json").write_text(json.dumps(mc.to_hf_config()))
    models.append((str(tmp_path / name), name))
  cd = config_lib.load_config("configs/toy.py:graft")
  with cd.unlocked():
    base.set_models(cd, models)
    cd.max_prompt_len, cd.max_response_len = 16, 48
  cfg = config_lib.from_config_dict(cd)
  mesh, available, table = run_plan.plan(cfg, jax.devices()[:1], 10**10, platform="cpu")
  assert [r["name"] for r in table] == ["a", "b", "c"]
  state = {r["name"]: r["mem"].params + r["mem"].opt_state for r in table}
  for r in table:
    n = run_plan.num_params(run_plan.model_config(cfg.models["abc".index(r["name"])]))
    assert r["mem"].params == 4 * n  # fp32 weights on the one device
    assert r["peer_state"] == sum(v for k, v in state.items() if k != r["name"])
    assert r["fits"]
  text = run_plan.format_plan(mesh, available, table, 64)
  assert all(f"\n{n} " in text for n in "abc")


def _row(update, sampling):
  return dict(update=update, sampling=sampling)


def test_placement_puts_each_share_on_its_gpus():
  gib = 2**30
  cfg = _cfg(engine="vllm", jax_devices=(0, 1), vllm__gpus__model_a=(2,),
             vllm__gpus__model_b=(3,), vllm__gpu_memory_utilization=0.9)
  servers = [dict(name="a", gpus=(2,), weights=6 * gib), dict(name="b", gpus=(3,), weights=4 * gib)]
  rows = run_plan.placement(cfg, 4, 100 * gib, [_row(50 * gib, 30 * gib), _row(20 * gib, 60 * gib)],
                            servers, margin_bytes=4 * gib)
  assert [[u["who"] for u in r["users"]] for r in rows] == [
      ["trainer"], ["trainer"], ["vLLM a"], ["vLLM b"]]
  trainer = rows[0]["users"][0]
  assert trainer["need"] == 64 * gib and trainer["share"] == 90 * gib  # largest phase + margin
  assert rows[2]["users"][0]["need"] == 6 * gib and all(r["fits"] for r in rows)
  text = run_plan.format_placement(rows, 100 * gib, "nccl")
  assert "weight sync: nccl" in text and "GPU 2: vLLM a 0.90 = 90.00 GiB" in text
  # The trainer's phase over its share, and a GPU whose shares pass 1, do not fit.
  rows = run_plan.placement(cfg, 4, 50 * gib, [_row(50 * gib, 30 * gib)], servers,
                            margin_bytes=4 * gib)
  assert not rows[0]["fits"] and "DOES NOT FIT" in run_plan.format_placement(rows, 50 * gib, "x")
  shared = _cfg(xla_mem_fraction=0.5, vllm__gpu_memory_utilization=0.4)
  rows = run_plan.placement(shared, 1, 100 * gib, [], [dict(servers[0], gpus=(0,)),
                                                       dict(servers[1], gpus=(0,))], 0)
  assert rows[0]["fraction"] == pytest.approx(1.3) and not rows[0]["fits"]


def test_the_slot_pools_cache_is_in_the_memory_plan():
  # Qwen3-1.7B by hand: 28 layers x 8 KV heads x 128, keys and values, bf16: 114,688
  # bytes a position. The pair's pool: 64 slots over 4 batch devices = 16 a device,
  # each a window of the 2,048-token prompt bucket + 4,096; shrinking, 8 more beside.
  cfg = _cfg()
  assert (cfg.rollout.sampler, cfg.rollout.pool_slots, cfg.max_prompt_len,
          cfg.max_response_len, cfg.dtype) == ("pool", 64, 2048, 4096, "bfloat16")
  qwen = run_plan.PRESETS["qwen3_1p7b"]()
  per_position = 2 * 28 * 8 * 128 * 2
  want = (16 + 8) * (2048 + 4096) * per_position
  assert run_plan.sampler_kv_bytes(cfg, qwen, row_shards=4) == (want, True)
  # The static sampler's budget is a different number: the pool's is not the sampler's.
  static = run_plan.sampler_kv_bytes(_cfg(rollout__sampler="static"), qwen, row_shards=4)
  assert static[0] != want
  # 1,000 prompt tokens take the 1,024 bucket, in whole 256-token chunks.
  odd = _cfg(max_prompt_len=1000, rollout__pool_slots=6)
  assert run_plan.sampler_kv_bytes(odd, qwen, row_shards=4)[0] == (2 + 1) * (1024 + 4096) * (
      per_position)
