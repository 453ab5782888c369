"""The toy pair's recipe: architectures, tokenizers, strategy priors, pools, and its cache key.

Model A is Qwen3-like (QK-norm, RoPE in every layer, byte-level tokenizer);
model B is SmolLM3-like (a NoPE layer, character tokenizer), about three
times larger. Both are warm-started on both column families
(`graft_jax.data.synthetic_columns`) and learn both procedures there; what
differs is how often each *chooses* the correct one: A mostly on addition, B
mostly on multiplication, each rarely on the other's family.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from graft_jax.models import ModelConfig
from graft_jax.toy.warm_start import SFTConfig

# The trainer's prompt is problem + suffix; the toy config must use this one.
PROMPT_SUFFIX = " Answer:"
# Bump when the build code changes what it produces for the same settings.
RECIPE_VERSION = 4
DEFAULT_ROOT = "runs/toy_pair"


@dataclasses.dataclass(frozen=True)
class ToyModelSpec:
  """One toy model: architecture, tokenizer, strategy prior and warm-start schedule.

  `competence` lists (family, p): the share of the model's warm-start traces
  of that family that choose the correct procedure, i.e. the probability it
  learns to put on the correct strategy word.
  """

  name: str
  model_type: str  # "qwen3" | "smollm3"; also picks the tokenizer kind
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  competence: tuple[tuple[str, float], ...]
  sft: SFTConfig = SFTConfig()
  no_rope_layers: tuple[int, ...] = ()  # smollm3: 1 = RoPE, 0 = NoPE

  def model_config(self, vocab_size: int, eos_id: int, pad_id: int,
                   max_positions: int) -> ModelConfig:
    """The ModelConfig, made the way `load_hf` reads it back from config.json."""
    hf: dict[str, Any] = dict(
        model_type=self.model_type, vocab_size=vocab_size, hidden_size=self.hidden_size,
        intermediate_size=self.intermediate_size, num_hidden_layers=self.num_layers,
        num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
        head_dim=self.head_dim, rms_norm_eps=1e-6, max_position_embeddings=max_positions,
        tie_word_embeddings=True, rope_theta=10000.0, bos_token_id=None,
        eos_token_id=eos_id, pad_token_id=pad_id)
    if self.model_type == "smollm3":
      hf["no_rope_layers"] = list(self.no_rope_layers or (1,) * self.num_layers)
    return ModelConfig.from_hf_config(hf)

  @property
  def strong_family(self) -> str:
    return max(self.competence, key=lambda fp: fp[1])[0]


@dataclasses.dataclass(frozen=True)
class ToyPairConfig:
  """Everything that determines the built pair (and so its cache key).

  Per family, one seeded draw of distinct problems is cut into disjoint pools
  (`graft_jax.toy.pools`): held-out evaluation (`eval_per_family`), RL
  prompts (`rl_per_family`), and for each model `warm_per_family` problems
  with one trace each (strategy chosen at the model's p) plus
  `drill_per_family` problems traced with both procedures, the strategy
  words given as context and not trained on (so both models execute both
  procedures in both families, while the strategy prior comes only from the
  first set). `groups` names the per-family table's columns.
  """

  model_a: ToyModelSpec
  model_b: ToyModelSpec
  seed: int = 0
  families: tuple[str, ...] = ("cadd", "cmul")
  difficulty: int = 2  # 3-digit operands
  warm_per_family: int = 1000
  drill_per_family: int = 600
  rl_per_family: int = 1024
  eval_per_family: int = 512
  max_len: int = 72  # prompt + response + EOS, in either tokenizer
  groups: tuple[tuple[str, tuple[str, ...]], ...] = (("add", ("cadd",)), ("mul", ("cmul",)))
  eval_samples: int = 2
  max_new_tokens: int = 48

  @property
  def eval_families(self) -> tuple[str, ...]:
    return tuple(f for _, fams in self.groups for f in fams)

  @property
  def models(self) -> tuple[ToyModelSpec, ...]:
    return (self.model_a, self.model_b)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ToyGroupConfig(ToyPairConfig):
  """A toy group of K > 2 models: the pair's settings plus `more` models (model_c, ...).

  Built by the pair's code (`graft_jax.toy.pair.ensure_toy_pair`) into one
  folder per model; its pools (`graft_jax.toy.group_pools`) may use the
  column-subtraction family `csub` (`graft_jax.data.synthetic_borrow`).
  A subclass, so a pair config's fields, and so the shipped pair's key, stay as they are.
  """

  more: tuple[ToyModelSpec, ...] = ()

  @property
  def models(self) -> tuple[ToyModelSpec, ...]:
    return (self.model_a, self.model_b, *self.more)


def default_config(seed: int = 0) -> ToyPairConfig:
  """The embedded default's pair.

  Strategy priors 0.7 on the own family (GRPO has something to sharpen) and
  0.003 on the peer's: most of a model's groups there are all-fail, while the
  peer's correct traces differ from its own only in the strategy word, about
  log(0.7/0.003) = 5.5 nats over a ~40-token trace (s near 0.87 > 0.8).
  A model's habitual word (toy_a's "up", toy_b's "down") is the bug on its
  weak family (`graft_jax.data.synthetic_columns`), so RL that sharpens the
  habit on the strong family does not teach the weak one. Each strategy word
  must be one token in both tokenizers (a test checks): spread over several
  rarely trained tokens, it would cost the gate far more than the prior's
  5.5 nats.
  Heads are 32 wide: vLLM's CPU attention backend refuses head_dim 16, and the
  pair must also serve from vLLM sidecars (`configs/toy.py:vllm`).
  """
  a = ToyModelSpec(
      name="toy_a", model_type="qwen3", vocab_size=320, hidden_size=64,
      intermediate_size=192, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=32,
      competence=(("cadd", 0.7), ("cmul", 0.003)),
      sft=SFTConfig(steps=1600, batch_size=32, lr=3e-3))
  b = ToyModelSpec(
      name="toy_b", model_type="smollm3", vocab_size=256, hidden_size=96,
      intermediate_size=192, num_layers=4, num_heads=3, num_kv_heads=1, head_dim=32,
      no_rope_layers=(1, 1, 1, 0), competence=(("cadd", 0.003), ("cmul", 0.7)),
      sft=SFTConfig(steps=2000, batch_size=32, lr=3e-3, weight_decay=0.1))
  return ToyPairConfig(model_a=a, model_b=b, seed=seed)


def tiny_config(seed: int = 0) -> ToyPairConfig:
  """A seconds-long build for tests: same structure, trivial training."""
  cfg = default_config(seed)
  sft = SFTConfig(steps=4, batch_size=8, warmup_steps=2)
  a = dataclasses.replace(cfg.model_a, hidden_size=32, intermediate_size=64, num_layers=1,
                          head_dim=8, sft=sft)
  b = dataclasses.replace(cfg.model_b, hidden_size=32, intermediate_size=64, num_layers=2,
                          head_dim=8, no_rope_layers=(1, 0), sft=sft)
  return dataclasses.replace(cfg, model_a=a, model_b=b, warm_per_family=24,
                             drill_per_family=8, rl_per_family=48, eval_per_family=4,
                             eval_samples=2, max_new_tokens=8)


TRIO_ROOT = "runs/toy_trio"
TRIO_GROUPS = (("add", ("cadd",)), ("mul", ("cmul",)), ("sub", ("csub",)))


def trio_config(seed: int = 0) -> ToyGroupConfig:
  """The K = 3 toy: the pair's two architectures plus toy_c, one strong family each.

  Each model chooses the correct procedure with p = 0.7 on its own family and
  0.003 on the other two, as in the pair. toy_c is a deeper, wider-vocabulary
  Qwen3-like model (3 layers, full multi-head attention, 400-token byte-level
  BPE) strong on column subtraction, whose strategy words (`borrow yes/no`)
  mean nothing on the carry families. Pools are smaller than the pair's per
  family (3 families x 3 warm starts must fit in one draw of 3-digit problems);
  a step draws 8 prompts of each family (`configs/toy3.py`).
  """
  pair = default_config(seed)
  low = 0.003
  a = dataclasses.replace(pair.model_a, competence=(("cadd", 0.7), ("cmul", low), ("csub", low)))
  b = dataclasses.replace(pair.model_b, competence=(("cadd", low), ("cmul", 0.7), ("csub", low)))
  c = ToyModelSpec(
      name="toy_c", model_type="qwen3", vocab_size=400, hidden_size=64,
      intermediate_size=192, num_layers=3, num_heads=2, num_kv_heads=2, head_dim=32,
      competence=(("cadd", low), ("cmul", low), ("csub", 0.7)),
      sft=SFTConfig(steps=1600, batch_size=32, lr=3e-3))
  return ToyGroupConfig(model_a=a, model_b=b, more=(c,), seed=seed,
                        families=("cadd", "cmul", "csub"), warm_per_family=800,
                        drill_per_family=400, rl_per_family=512, eval_per_family=512,
                        groups=TRIO_GROUPS)


def tiny_trio_config(seed: int = 0) -> ToyGroupConfig:
  """`trio_config`'s structure at `tiny_config`'s sizes (a seconds-long build for tests)."""
  tiny, trio = tiny_config(seed), trio_config(seed)
  c = dataclasses.replace(trio.more[0], hidden_size=32, intermediate_size=64, num_layers=1,
                          head_dim=8, sft=tiny.model_a.sft)
  fields = {f.name: getattr(tiny, f.name) for f in dataclasses.fields(tiny)}
  fields.update(model_a=dataclasses.replace(tiny.model_a, competence=trio.model_a.competence),
                model_b=dataclasses.replace(tiny.model_b, competence=trio.model_b.competence),
                families=trio.families, groups=trio.groups)
  return ToyGroupConfig(**fields, more=(c,))


FRICTION_ROOT = "runs/toy_friction"


@dataclasses.dataclass(frozen=True)
class ToyFrictionConfig(ToyPairConfig):
  """The friction regime: the pair's settings plus memorized shortcuts (`graft_jax.toy.friction`).

  Each model is also trained on `memorized_per_model` problems of its strong
  family's RL pool, `memorized_repeats` times each, answered in its own
  `shortcut_formats[i]` (a ``str.format`` template with ``{answer}``) with no
  trace. A subclass, so the shipped pair's fields, and so its key, stay as they are.
  """

  memorized_per_model: int = 128
  memorized_repeats: int = 6
  shortcut_formats: tuple[str, ...] = (" \\boxed{{{answer}}}", " = \\boxed{{{answer}}}")


def friction_config(seed: int = 0) -> ToyFrictionConfig:
  """The second toy regime: the default pair's models, pools and priors, plus memorized
  shortcuts that are correct on the RL prompts but harmful for the peer to imitate."""
  fields = {f.name: getattr(default_config(seed), f.name)
            for f in dataclasses.fields(ToyPairConfig)}
  return ToyFrictionConfig(**fields)


def tiny_friction_config(seed: int = 0) -> ToyFrictionConfig:
  """`friction_config`'s structure at `tiny_config`'s sizes (tests)."""
  tiny = tiny_config(seed)
  fields = {f.name: getattr(tiny, f.name) for f in dataclasses.fields(ToyPairConfig)}
  return ToyFrictionConfig(**fields, memorized_per_model=8)


@dataclasses.dataclass(frozen=True)
class Regime:
  """A shipped toy setting: its pair config (per seed, and tiny for tests), where it is
  built, the folder (beside this module) its prebuilt pair ships in, and the training
  config file (in configs/) its runs start from."""

  name: str
  config: Any  # seed -> ToyPairConfig
  tiny: Any  # seed -> ToyPairConfig
  root: str
  shipped: str
  config_file: str


REGIMES = {
    "default": Regime("default", default_config, tiny_config, DEFAULT_ROOT, "prebuilt",
                      "configs/toy.py"),
    "friction": Regime("friction", friction_config, tiny_friction_config, FRICTION_ROOT,
                       "prebuilt_friction", "configs/toy_friction.py"),
}


def regime_of(cfg: ToyPairConfig) -> Regime | None:
  """The shipped regime whose config class `cfg` is (None for a group)."""
  if isinstance(cfg, ToyGroupConfig):
    return None
  return REGIMES["friction" if isinstance(cfg, ToyFrictionConfig) else "default"]


def cache_key(cfg: ToyPairConfig) -> str:
  """sha256 over the settings, the recipe version and the synthetic generators' source
  (a group's also over its own pools and the subtraction family, the friction regime's
  over its shortcut rows)."""
  from graft_jax.data import (  # pylint: disable=import-outside-toplevel
      synthetic, synthetic_borrow, synthetic_columns, synthetic_families)
  from graft_jax.toy import group_pools, pools  # pylint: disable=import-outside-toplevel

  h = hashlib.sha256()
  h.update(json.dumps({"recipe": RECIPE_VERSION, "prompt_suffix": PROMPT_SUFFIX,
                       "config": cfg.to_json()}, sort_keys=True).encode())
  modules = [synthetic, synthetic_columns, synthetic_families, pools]
  if isinstance(cfg, ToyGroupConfig):
    modules += [synthetic_borrow, group_pools]
  if isinstance(cfg, ToyFrictionConfig):
    from graft_jax.toy import friction  # pylint: disable=import-outside-toplevel
    modules.append(friction)
  for module in modules:
    h.update(Path(module.__file__).read_bytes())
  return h.hexdigest()[:16]
