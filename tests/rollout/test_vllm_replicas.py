"""A model served by two vLLM servers (`VLLMReplicas`) samples the rows one server would, and
every sync reaches both; and the splitting of a call's prompts."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from graft_jax.rollout import SamplingParams
from graft_jax.rollout.vllm_engine import VLLMEngine
from graft_jax.rollout.vllm_replicas import VLLMReplicas, split
import vllm_models
from vllm_fixtures import options


@given(st.integers(0, 300), st.integers(1, 9))
def test_split_covers_the_prompts_in_order_in_near_equal_parts(num, parts):
  out = split(num, parts)
  assert [i for s, t in out for i in range(s, t)] == list(range(num))
  sizes = [t - s for s, t in out]
  assert len(out) == min(num, parts) and (not sizes or max(sizes) - min(sizes) <= 1)
  assert sizes == sorted(sizes, reverse=True)


@pytest.mark.slow
def test_two_replicas_sample_one_servers_rows_and_take_every_sync(vllm_pair, tmp_path):
  one, model, tok = vllm_pair["a"]
  second = VLLMEngine(model, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id,
                      run_dir=tmp_path / "r1", options=options(), name="a", check_every=1)
  try:
    both = VLLMReplicas([one, second])
    prompts = [tok.encode(f"Say {w}.") for w in ("a", "b", "ab", "ba", "aab")]
    params = SamplingParams(max_new_tokens=12, seed=7)
    alone = one.generate(prompts, 3, params)
    split_up = both.generate(prompts, 3, params)
    np.testing.assert_array_equal(split_up.prompt_index_B, alone.prompt_index_B)
    np.testing.assert_array_equal(split_up.tokens_BxL, alone.tokens_BxL)
    np.testing.assert_allclose(split_up.logp_BxL, alone.logp_BxL, atol=1e-5)
    # New weights reach both servers: each checks them with its probe (check_every=1).
    both.set_weights(vllm_models.make_pair(seed=7)["a"][0])
    assert one.syncs >= 1 and second.syncs == 1
    assert both.last_sync_metrics["vllm_replicas"] == 2.0
    assert both.last_sync_metrics["vllm_probe_mean_abs"] <= one.probe_tolerance
    assert not np.array_equal(both.generate(prompts, 3, params).tokens_BxL, alone.tokens_BxL)
  finally:
    second.close()
