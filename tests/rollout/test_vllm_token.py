"""A real vLLM server on TCP (``vllm.host``) refuses every route without the run's token,
the weight-reload and weight-transfer routes included, and serves the trainer's calls,
which carry it."""

import json

import numpy as np
import pytest

import vllm_models
from graft_jax.rollout import SamplingParams, vllm_http
from graft_jax.rollout.vllm_engine import VLLMEngine
from tests.rollout import vllm_fixtures

pytestmark = pytest.mark.slow
ROUTES = [("POST", "/collective_rpc"), ("POST", "/reset_prefix_cache"),
          ("POST", "/init_weight_transfer_engine"), ("POST", "/start_weight_update"),
          ("POST", "/update_weights"), ("POST", "/finish_weight_update"),
          ("GET", "/get_world_size"), ("GET", "/health"), ("GET", "/metrics"),
          ("POST", "/v1/completions"), ("OPTIONS", "/collective_rpc")]


def test_every_route_of_a_tcp_server_takes_the_token(tmp_path):
  vllm_fixtures.require_vllm_python()
  model, tok = vllm_models.make_pair()["a"]
  engine = VLLMEngine(model, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id,
                      run_dir=tmp_path / "a", options=vllm_fixtures.options(host="127.0.0.1"),
                      name="a", check_every=1)
  with engine:
    sidecar = engine.sidecar
    batch = engine.generate([[5, 6, 7]], 2, SamplingParams(max_new_tokens=4, seed=1))
    assert batch.tokens_BxL.shape[0] == 2
    host, port = sidecar.url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"method": "reload_weights"}).encode()
    for token in ("", "x" * len(sidecar.token), sidecar.token[:-1]):
      for method, path in ROUTES:
        status, reply = vllm_http.request(method, path, body, timeout=30, host=host,
                                          port=int(port), token=token)
        assert (status, json.loads(reply)) == (401, {"error": "Unauthorized"}), (path, token)
    engine.set_weights(vllm_models.make_pair(seed=7)["a"][0])  # /collective_rpc, the probe
    assert engine.last_sync_metrics["vllm_probe_max_abs"] < 1e-3
    assert np.isfinite(engine.generate([[5, 6]], 1, SamplingParams(max_new_tokens=2)).logp_BxL).all()
    assert engine.restarts == 0
