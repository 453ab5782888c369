"""exchange_view on the tiny pair: every peer response once per direction, the gate's rule, the selection."""

import numpy as np
import pytest

from graft_jax import toy
from graft_jax.experiments import exchange_view, toy_compare
from graft_jax.models import load_hf, load_tokenizer
from graft_jax.config import run_config as config_lib
from graft_jax.train.trainer import Trainer

pytestmark = pytest.mark.slow  # builds the tiny pair and compiles both samplers


@pytest.fixture(scope="module")
def view(tmp_path_factory):
  root = tmp_path_factory.mktemp("xv")
  pair_cfg = toy.tiny_config()
  pair = toy.ensure_toy_pair(root / "pair", pair_cfg, evaluate=False)
  cd = config_lib.load_config("configs/toy.py:graft")
  with cd.unlocked():
    cd.workdir, cd.max_response_len, cd.n = str(root / "run"), pair_cfg.max_new_tokens, 4
    cd.prompts_per_step = 4
    cd.logging.tensorboard = cd.logging.progress_bar = False
  cfg = config_lib.from_config_dict(cd)
  problems = toy_compare.train_problems(pair_cfg, 12, seed=0)[:6]
  trainer = Trainer(cfg, problems, toy_compare.load_pair(pair))
  rows = exchange_view.exchange_view(cfg, trainer.policies, problems, trainer.reward_fn, seed=3)
  trainer.close()
  return cfg, pair, problems, rows


def test_one_row_per_peer_response_each_way(view):
  cfg, _, problems, rows = view
  assert len(rows) == 2 * len(problems) * cfg.n
  for recv in ("toy_a", "toy_b"):
    mine = [r for r in rows if r.receiver == recv]
    assert [r.prompt for r in mine] == [p.problem for p in problems for _ in range(cfg.n)]
    # The peer's group rewards add up to the k_peer recorded on each of its rows.
    for q in range(len(problems)):
      group = mine[q * cfg.n:(q + 1) * cfg.n]
      assert sum(r.reward for r in group) == group[0].k_peer


def test_gate_and_selection_rules(view):
  cfg, _, _, rows = view
  for r in rows:
    if np.isfinite(r.lbar_recv):
      np.testing.assert_allclose(r.s, np.exp(np.float64(r.lbar_recv) - r.lbar_gen), rtol=1e-5)
      assert r.admitted == (r.s > cfg.graft.delta)
    else:
      assert not r.admitted and r.recv_tokens == 0
    if r.selected:
      assert r.k_recv == 0 and 1 <= r.k_peer <= cfg.n - 1


def test_receiver_scores_match_teacher_forcing(view):
  """lbar_recv: the receiver's mean log-prob of the re-tokenized text (+ EOS), computed here directly."""
  cfg, pair, _, rows = view
  import jax.numpy as jnp
  from graft_jax.models import token_logprobs
  model, _ = load_hf(pair.model_a)
  tok = load_tokenizer(pair.model_a)
  for r in [r for r in rows if r.receiver == "toy_a" and r.recv_tokens][:6]:
    prompt = tok.encode(r.prompt + cfg.data.prompt_suffix, add_special_tokens=False)
    resp = tok.encode(r.text, add_special_tokens=False)
    resp = resp + [tok.eos_token_id] if len(resp) < r.recv_tokens else resp
    assert len(resp) == r.recv_tokens
    ids = jnp.asarray([prompt + resp])
    logp = np.asarray(token_logprobs(model, ids, jnp.ones_like(ids)))[0, len(prompt):]
    np.testing.assert_allclose(r.lbar_recv, logp.mean(), rtol=1e-4, atol=1e-5)


def test_summary_counts(view):
  cfg, _, problems, rows = view
  summary = exchange_view.summarize(rows, cfg.graft.delta)
  for recv, s in summary.items():
    mine = [r for r in rows if r.receiver == recv]
    assert s["prompts"] == len(problems)
    assert s["offered"] == sum(r.selected for r in mine) == cfg.n * s["selected_groups"]
    assert s["admitted"] == sum(r.selected and r.admitted for r in mine)
    assert 0.0 <= s["roundtrip_share"] <= 1.0
