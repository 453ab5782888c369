"""One trainable policy: its model split into graph and params, optimizer, tokenizer and engine."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import jax
import numpy as np
from flax import nnx

from graft_jax.rollout import ContinuousSamplerEngine, JaxSamplerEngine
from graft_jax.sharding import shard_model, state_shardings
from graft_jax.train.update import make_optimizer


def tokenizer_identity(tokenizer) -> str:
  """A short, stable fingerprint of a tokenizer's vocabulary."""
  vocab = sorted(tokenizer.get_vocab().items())
  return hashlib.sha1(repr(vocab).encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class PoolSettings:
  """The slot pool's shape (``rollout.pool_*``) and the capacities its program is
  compiled for: ``max_prompt_len`` and ``max_response_len`` tokens, a step's
  ``prompts_per_step`` x ``n`` requests (a larger call, validation's, raises the last
  once)."""
  slots: int
  prefill_chunk: int
  prefill_group: int
  max_prompt_len: int
  max_new_tokens: int = 16
  max_requests: int = 1
  refill_at: int = 1  # free slots a device waits for before a refill

  @classmethod
  def from_config(cls, cfg) -> "PoolSettings | None":
    """None unless the config's JAX engine is the pool."""
    r = cfg.rollout
    if cfg.engine != "jax" or r.sampler != "pool":
      return None
    return cls(r.pool_slots, r.pool_prefill_chunk, r.pool_prefill_group, cfg.max_prompt_len,
               cfg.max_response_len, cfg.prompts_per_step * cfg.n,
               r.pool_refill_at or r.pool_prefill_group)


@dataclasses.dataclass
class Policy:
  """Mutable per-run state of one model; ``params`` and ``opt_state`` are replaced each update."""

  name: str
  graphdef: Any
  params: Any
  opt_state: Any
  tx: Any
  tokenizer: Any
  engine: Any
  prompt_suffix: str
  ref_params: Any = None
  mesh: Any = None
  param_sharding: Any = None  # NamedSharding trees, with a mesh
  opt_sharding: Any = None
  compiled: dict = dataclasses.field(default_factory=dict)  # update programs by loss (train.update)

  @property
  def eos_id(self) -> int:
    return int(self.tokenizer.eos_token_id)

  @property
  def pad_id(self) -> int:
    return int(self.tokenizer.pad_token_id)

  @property
  def model(self):
    return nnx.merge(self.graphdef, self.params)

  @property
  def tokenizer_id(self) -> str:
    return tokenizer_identity(self.tokenizer)

  def prompt_ids(self, problem: str) -> list[int]:
    """The receiver-side prompt: problem + template suffix, tokenized without special tokens."""
    ids = self.tokenizer.encode(problem + self.prompt_suffix, add_special_tokens=False)
    if not ids:
      raise ValueError(f"{self.name}: problem {problem[:40]!r} tokenizes to nothing")
    return ids

  def decode(self, ids) -> str:
    return self.tokenizer.decode(list(ids), skip_special_tokens=True)

  def encode_response(self, text: str, finished: bool) -> list[int]:
    """Peer text in this policy's tokenization; EOS only if the peer's response finished.
    A finished response of EOS alone has no text but is still an answer (a wrong one):
    it comes out as this policy's EOS, so it keeps its row and its advantage."""
    ids = self.tokenizer.encode(text, add_special_tokens=False) if text else []
    return ids + [self.eos_id] if finished else ids

  def set_params(self, params, opt_state) -> None:
    self.params, self.opt_state = params, opt_state
    self.engine.set_weights(params)


def make_policy(name: str, model, tokenizer, opt_cfg, prompt_suffix: str, *,
                keep_reference: bool = False, mesh=None, sampler_streams: int = 0,
                pool=None) -> Policy:
  """Wraps a loaded decoder: optimizer state, a JAX sampler engine, optional frozen reference.

  With a ``mesh``, the parameters are placed by their logical axes
  (``graft_jax.sharding``) and the optimizer state is created sharded the
  same way (its moments by their parameters' axes, step counts replicated):
  ``tx.init`` runs under the mesh with explicit ``out_shardings``, so no
  state ever sits whole on one device. The compiled update keeps both.
  ``sampler_streams`` is the engine's ``streams`` (0: its default). ``pool`` (a
  `PoolSettings`) swaps the static sampler for the slot pool (`ContinuousSamplerEngine`).
  """
  tx = make_optimizer(opt_cfg)
  param_sharding = opt_sharding = None
  if mesh is None:
    graphdef, params = nnx.split(model)
    opt_state = jax.jit(tx.init)(params)
  else:
    param_sharding = shard_model(model, mesh)
    graphdef, params = nnx.split(model)
    opt_sharding = state_shardings(jax.eval_shape(tx.init, params), mesh)
    with jax.set_mesh(mesh):
      opt_state = jax.jit(tx.init, out_shardings=opt_sharding)(params)
  if pool is None:
    engine = JaxSamplerEngine(model, eos_ids=tokenizer.eos_token_id,
                              pad_id=tokenizer.pad_token_id, state_sharding=param_sharding,
                              mesh=mesh, streams=sampler_streams or None)
  else:
    engine = ContinuousSamplerEngine(model, eos_ids=tokenizer.eos_token_id,  # same fields
                                     pad_id=tokenizer.pad_token_id, mesh=mesh,
                                     **dataclasses.asdict(pool))
  ref = jax.tree.map(np.asarray, params) if keep_reference else None
  return Policy(name, graphdef, params, opt_state, tx, tokenizer, engine, prompt_suffix, ref, mesh,
                param_sharding, opt_sharding)
