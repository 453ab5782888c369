"""Every prompt of a call is sent to the vLLM server at once (``vllm.max_concurrency=0``, the
default): no prompt waits on the client for another's slowest sample."""

import threading

import numpy as np
import pytest

from graft_jax.rollout import SamplingParams

pytestmark = pytest.mark.slow
PROMPTS = 80  # more than the 64 requests a call once held in flight at most


def test_every_prompt_of_a_call_is_in_flight_at_once(vllm_pair, monkeypatch):
  engine, _, tok = vllm_pair["a"]
  assert engine.max_concurrency == 0
  prompts = [tok.encode(f"Say {i % 10}.") for i in range(PROMPTS)]
  params = SamplingParams(max_new_tokens=4, seed=3)
  engine.generate(prompts[:1], 1, params)  # a server still booting is probed first: not here
  # Each request enters the server only once all of them have been opened: with fewer
  # requests in flight than prompts, the barrier breaks (BrokenBarrierError) instead.
  opened = threading.Barrier(PROMPTS, timeout=60)
  post = engine.sidecar.post

  def post_when_all_are_open(path, body=None, *, timeout):
    if path == "/v1/completions":
      opened.wait()
    return post(path, body, timeout=timeout)
  monkeypatch.setattr(engine.sidecar, "post", post_when_all_are_open)
  batch = engine.generate(prompts, 2, params)
  assert batch.tokens_BxL.shape == (2 * PROMPTS, 4)
  np.testing.assert_array_equal(batch.prompt_index_B, np.repeat(np.arange(PROMPTS), 2))
  assert batch.mask_BxL[:, 0].all()  # every request came back with its samples
