"""The pair plan's device shares: the trainer's JAX fraction and each vLLM server's budget."""

import pytest

from graft_jax.sharding import pair_plan
from graft_jax.train import config as config_lib
from graft_jax.train import config_load


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
  got = pair_plan.num_params(pair_plan.PRESETS["qwen3_1p7b"]())
  assert got == _qwen3_1p7b_params_by_hand() == 1_720_574_976


def test_trainer_share_is_jax_default_unless_set():
  assert pair_plan.trainer_fraction(_cfg()) == 0.75
  assert pair_plan.trainer_fraction(_cfg(xla_mem_fraction=0.5)) == 0.5


def test_vllm_server_budgets_subtract_serving_weights():
  assert pair_plan.server_budgets(_cfg(), 141 * 10**9) == []  # the JAX engine: no servers
  # Servers on GPUs 0-1 and 2, the trainer on GPU 3 (no shared GPU, so no split needed).
  cfg = _cfg(engine="vllm", jax_devices=(3,), vllm__gpus__model_a=(0, 1),
             vllm__gpus__model_b=(2,), vllm__gpu_memory_utilization=0.5, vllm__dtype="bfloat16")
  a, b = pair_plan.server_budgets(cfg, 100 * 10**9)
  assert (a["gpus"], a["share"]) == ((0, 1), 100 * 10**9)
  assert (b["gpus"], b["share"]) == ((2,), 50 * 10**9)
  qwen = next(s for s in (a, b) if s["name"] == cfg.model_b.name)
  assert cfg.model_b.name == "qwen3_1p7b"
  assert qwen["weights"] == 2 * _qwen3_1p7b_params_by_hand()
  assert qwen["kv"] == qwen["share"] - qwen["weights"] and qwen["fits"]
  tiny = pair_plan.server_budgets(cfg, 6 * 10**9)  # 3 GB for 3.4 GB of bf16 weights
  assert not next(s for s in tiny if s["name"] == "qwen3_1p7b")["fits"]
  assert "NO ROOM" in pair_plan.format_servers(tiny)
