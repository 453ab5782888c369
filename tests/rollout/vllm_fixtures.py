"""The session's two real vLLM sidecars (one per tiny policy): started once, checked gone
at the end, and given back to each test serving the weights they started with."""

import pathlib

import jax
import numpy as np
import pytest
from flax import nnx

from graft_jax.rollout import SamplingParams
from graft_jax.rollout.vllm_engine import VLLMEngine
from graft_jax.rollout.vllm_sidecar import SidecarOptions, group_members

REPO = pathlib.Path(__file__).parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
# Taken at import: a test that patches the class's method may still have it patched
# when the servers are restored (fixtures are torn down in the reverse of their set-up).
_SET_WEIGHTS = VLLMEngine.set_weights
# Engine settings a test may change (monkeypatch puts them back, but it may be torn down
# after `vllm_pair`).
_ENGINE_SETTINGS = ("eos_ids", "pad_id", "check_every", "probe_tolerance", "max_restarts",
                    "request_timeout_s", "health_every_s", "max_concurrency", "weight_sync")


def require_vllm_python() -> pathlib.Path:
  """The sidecars' interpreter; a missing .venv-vllm fails the test (make test builds it)."""
  if not VLLM_PYTHON.exists():
    pytest.fail(f"{VLLM_PYTHON} is missing: run `make vllm-venv` (make test does)")
  return VLLM_PYTHON


def options(**kw) -> SidecarOptions:
  """CPU settings: fp32 for exact log-probs, eager mode for the fastest start."""
  return SidecarOptions(python=str(VLLM_PYTHON), dtype="float32", max_model_len=256,
                        enforce_eager=True, **kw)


def _fresh(graphdef, weights):
  """A model of its own on a copy of the host weights, so what a test does to it stays
  with that test. Host (NumPy) arrays, as `vllm_models.make_pair` gives them: an update,
  which donates its inputs, copies them to the device first, so a test may train from
  them more than once."""
  return nnx.merge(graphdef, jax.tree.map(np.copy, weights))


@pytest.fixture(scope="session")
def vllm_servers(tmp_path_factory):
  """{'a': (engine, graphdef, host weights, tokenizer), 'b': ...}. 'b' starts in turn, as
  servers sharing a GPU do: its server launches at its first call, here, once 'a''s is
  ready (`test_vllm_engine`). Tests use `vllm_pair`, which puts the servers back."""
  require_vllm_python()
  import vllm_models
  root = tmp_path_factory.mktemp("vllm")
  pair = vllm_models.make_pair()
  engines = {}
  for k, (m, tok) in pair.items():
    engines[k] = VLLMEngine(m, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id,
                            run_dir=root / k, options=options(), name=k, check_every=1,
                            start_after=tuple(engines.values()))
  assert engines["b"].sidecar.proc is None  # deferred until 'a' is ready
  pgids = []
  try:
    engines["b"].generate([[5, 6]], 1, SamplingParams(max_new_tokens=1))  # its first call
    pgids = [e.sidecar.pgid() for e in engines.values()]
    yield {k: (engines[k], nnx.graphdef(m), jax.device_get(nnx.state(m)), tok)
           for k, (m, tok) in pair.items()}
  finally:
    for e in engines.values():
      pgids.append(e.sidecar.pgid())  # restarts make new groups
      e.close()
  survivors = {g: group_members(g) for g in pgids if g and group_members(g)}
  assert not survivors, f"vLLM processes outlived the session: {survivors}"


@pytest.fixture
def vllm_pair(vllm_servers):
  """{'a': (engine, model, tokenizer), 'b': ...}: the session's servers and a fresh copy
  of the models they serve.

  A test may push other weights: once it ends, passed or failed, every server synced
  during it serves the session's weights again (checked by the engine's probe), so no
  test's result depends on which tests ran before it. The engines' settings (EOS ids,
  probe and restart settings) are put back too.
  """
  start = {k: (e.syncs, {a: getattr(e, a) for a in _ENGINE_SETTINGS})
           for k, (e, *_) in vllm_servers.items()}
  yield {k: (e, _fresh(graphdef, weights), tok)
         for k, (e, graphdef, weights, tok) in vllm_servers.items()}
  for k, (engine, graphdef, weights, _) in vllm_servers.items():
    syncs, settings = start[k]
    for a, v in settings.items():
      setattr(engine, a, v)
    if engine.syncs != syncs:
      _SET_WEIGHTS(engine, _fresh(graphdef, weights))
