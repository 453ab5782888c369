"""The session's two real vLLM sidecars (one per tiny policy): started once, checked gone
at the end."""

import pathlib

import pytest

from graft_jax.rollout.vllm_engine import VLLMEngine
from graft_jax.rollout.vllm_sidecar import SidecarOptions, group_members

REPO = pathlib.Path(__file__).parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


def require_vllm_python() -> pathlib.Path:
  """The sidecars' interpreter; a missing .venv-vllm fails the test (make test builds it)."""
  if not VLLM_PYTHON.exists():
    pytest.fail(f"{VLLM_PYTHON} is missing: run `make vllm-venv` (make test does)")
  return VLLM_PYTHON


def options(**kw) -> SidecarOptions:
  """CPU settings: fp32 for exact log-probs, eager mode for the fastest start."""
  return SidecarOptions(python=str(VLLM_PYTHON), dtype="float32", max_model_len=256,
                        enforce_eager=True, **kw)


@pytest.fixture(scope="session")
def vllm_pair(tmp_path_factory):
  """{'a': (engine, model, tokenizer), 'b': ...}; both servers boot in parallel."""
  require_vllm_python()
  import vllm_models
  root = tmp_path_factory.mktemp("vllm")
  pair = vllm_models.make_pair()
  engines = {k: VLLMEngine(m, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id,
                           run_dir=root / k, options=options(), name=k, check_every=1)
             for k, (m, tok) in pair.items()}
  pgids = [e.sidecar.pgid() for e in engines.values()]
  try:
    yield {k: (engines[k], *pair[k]) for k in pair}
  finally:
    for e in engines.values():
      pgids.append(e.sidecar.pgid())  # restarts make new groups
      e.close()
  survivors = {g: group_members(g) for g in pgids if g and group_members(g)}
  assert not survivors, f"vLLM processes outlived the session: {survivors}"
