"""A step's cost: the update's analytic FLOPs by hand and against XLA's count, and the
cost fields of a real two-step run against its own timings and rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from graft_jax.models import ModelConfig, init_model, token_logprobs
from graft_jax.outputs import cost_totals
from graft_jax.outputs import step_cost as cost
from tests.train import test_trainer_methods as runs
from tests.train import tiny_pair


def tiny_cfg(**kw):
  fields = dict(model_type="qwen3", vocab_size=10, hidden_size=4, intermediate_size=6,
                num_layers=2, num_heads=2, num_kv_heads=1, head_dim=3)
  return ModelConfig(**{**fields, **kw})


def test_flops_by_hand():
  mc = tiny_cfg()
  # Per layer: q 4*2*3 = 24, k 4*1*3 = 12, v 12, o 24, SwiGLU 3*4*6 = 72: 144; two
  # layers 288, plus the head 4*10 = 40.
  assert cost.matmul_params(mc) == 328
  # Rows of 3 and 5 tokens: sum 8, squares 9 + 25 = 34. Forward: 2*328*8 = 5248 in the
  # matrix products, 4 * 2 layers * 2 heads * 3 * 34 = 1632 in attention; x3.
  assert cost.update_flops(mc, 8, 34) == 3 * (5248 + 1632) == 20640
  # A tied embedding is still one vocabulary product.
  assert cost.matmul_params(tiny_cfg(model_type="llama", tie_word_embeddings=True)) == 328


def test_flops_against_xla_cost_analysis():
  """XLA's count of the compiled gradient of the update's forward (CPU) is within 5% of
  the analytic one: it also counts the norms, activations and softmax, which the model
  FLOPs leave out, so it is never below."""
  mc = tiny_cfg(vocab_size=64, hidden_size=64, intermediate_size=256, num_heads=4,
                num_kv_heads=2, head_dim=16, qk_norm=True)
  b, t = 4, 32
  gd, params = nnx.split(init_model(mc, rngs=nnx.Rngs(0)))
  ids, attn = jnp.zeros((b, t), jnp.int32), jnp.ones((b, t), bool)
  grad = jax.jit(jax.grad(lambda p: token_logprobs(nnx.merge(gd, p), ids, attn).sum()))
  analysis = grad.lower(params).compile().cost_analysis()
  xla = (analysis[0] if isinstance(analysis, list) else analysis)["flops"]
  ratio = xla / cost.update_flops(mc, b * t, b * t * t)
  assert 1.0 <= ratio <= 1.05, ratio


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
  """Two GRPO steps where every row runs (no silent rows left out)."""
  workdir = tmp_path_factory.mktemp("cost")
  cfg, rows = runs.train("grpo", workdir, skip_silent_rows=False)
  return cfg, rows, workdir


@pytest.mark.slow
def test_run_rows_carry_the_cost(grpo_run):
  cfg, rows, workdir = grpo_run
  models = tiny_pair.make_models()
  devices = jax.device_count()
  total = {"cost/run_device_s": 0.0, "cost/run_update_flops": 0.0}
  for step in sorted(rows):
    r = rows[step]
    assert r["cost/trainer_devices"] == devices
    step_s = 0.0
    for name, key in (("toy_a", "a"), ("toy_b", "b")):
      t = lambda k: r[f"time/{name}/{k}"]
      assert r[f"cost/{name}/sampler_devices"] == devices  # the JAX engine: the trainer's
      for phase, secs in (("sample", t("sample_s")), ("score", t("reward_s") + t("old_logp_s")),
                          ("update", t("update_s"))):
        assert r[f"cost/{name}/{phase}_device_s"] == pytest.approx(secs * devices, rel=1e-12)
        step_s += secs * devices
      # The update ran every row once (one epoch): its tokens are the prompts and the
      # responses the peer log recorded, counted here.
      ids, resp = response_ids(workdir, name, step)
      prompts = {p.id: len(models[key][1](p.problem + cfg.data.prompt_suffix)["input_ids"])
                 for p in tiny_pair.problems()}
      lens = np.array([prompts[i] + len(x) for i, x in zip(ids, resp)], np.float64)
      assert cfg.ppo_epochs == 1
      assert r[f"{name}/update/seq_tokens"] == lens.sum()
      assert r[f"{name}/update/seq_tokens_sq_sum"] == (lens ** 2).sum()
      assert r[f"cost/{name}/update_flops"] == pytest.approx(
          cost.update_flops(models[key][0].cfg, lens.sum(), (lens ** 2).sum()), rel=1e-12)
    exchange = (r["time/peers_s"] + r["time/exchange_s"]) * devices
    assert r["cost/exchange_device_s"] == pytest.approx(exchange, rel=1e-12)
    assert r["cost/device_s"] == pytest.approx(step_s + exchange, rel=1e-9)
    assert r["cost/update_flops"] == pytest.approx(
        r["cost/toy_a/update_flops"] + r["cost/toy_b/update_flops"], rel=1e-12)
    total = {k: v + r[k.replace("run_", "")] for k, v in total.items()}
    for k, v in total.items():
      assert r[k] == pytest.approx(v, rel=1e-12)
  summed = cost_totals.summed(list(rows.values()))
  assert summed["device_s"] == pytest.approx(total["cost/run_device_s"], rel=1e-12)
  assert summed["toy_a/update_flops"] == pytest.approx(
      sum(r["cost/toy_a/update_flops"] for r in rows.values()), rel=1e-12)
  assert "trainer_devices" not in summed and "run_device_s" not in summed


def response_ids(workdir, name, step):
  table = runs.peer_log.PeerLogReader(workdir / "peer_logs", name).load_step(step).to_pylist()
  return [r["prompt_id"] for r in table], [r["response_ids"] for r in table]
