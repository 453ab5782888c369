"""Build (or reuse) the toy heterogeneous pair as two Hugging Face model folders.

`ensure_toy_pair()` returns the folders of `runs/toy_pair/{model_a,model_b}`,
building them first when absent or made from other settings (the cache key is
`spec.cache_key`). A build is deterministic for a given config and seed. The
default pair ships prebuilt in `graft_jax/toy/prebuilt/` (about 2 MB; rebuilt
by `launch/make_toy_pair.py --ship`, bit for bit on the same kind of processor:
`toy.rebuild_check`) and is copied from there when
its key matches, so the main job spends its time on RL. A group of K > 2 models
(`spec.ToyGroupConfig`, e.g. `spec.trio_config()`) is built by the same code
into model_a, model_b, model_c, ...
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
import hashlib
import random

import jax
from flax import nnx

from graft_jax import host_fingerprint
from graft_jax.data.problem import Problem
from graft_jax.models import save_hf
from graft_jax.toy import friction, group_pools
from graft_jax.toy import pools as pools_lib
from graft_jax.toy import spec as spec_lib
from graft_jax.toy.problems import eval_problems, make_pools, prompt_text, response_text  # pylint: disable=unused-import
from graft_jax.toy.tokenizer import train_tokenizer
from graft_jax.toy.warm_start import init_host, tokenize_pairs, train_sft

log = logging.getLogger(__name__)
BUILD_FILE = "toy_pair.json"  # in the root: key, settings, timings, pass rates
FOLDERS = ("model_a", "model_b")  # a group (K > 2) adds model_c, model_d, ...
PREBUILT = Path(__file__).with_name("prebuilt")  # the default regime's shipped pair


def shipped_dir(cfg: spec_lib.ToyPairConfig) -> Path | None:
  """Where the prebuilt pair of `cfg`'s regime ships (None: a group, built on first use)."""
  regime = spec_lib.regime_of(cfg)
  return None if regime is None else Path(__file__).with_name(regime.shipped)


@dataclasses.dataclass(frozen=True)
class ToyPair:
  """The built pair: HF folder paths and what the build recorded."""

  root: Path
  model_a: Path
  model_b: Path
  key: str
  built: bool  # False when the cached folders were reused
  record: dict

  @property
  def model_dirs(self) -> tuple[Path, ...]:
    """Every model's folder, in the config's order (two for a pair)."""
    return tuple(self.root / f for f in folders(len(self.record["models"])))


def folders(k: int) -> tuple[str, ...]:
  """The folder names of a build of ``k`` models: model_a, model_b, model_c, ..."""
  return tuple(f"model_{chr(ord('a') + i)}" for i in range(k))


def rl_problems(cfg: spec_lib.ToyPairConfig, seed: int) -> list[Problem]:
  """The RL pool in a seeded order that alternates families, so every window of
  2k consecutive prompts holds k of each (a balanced stream when read unshuffled)."""
  per_family = {}
  for p in make_pools(cfg).rl:
    per_family.setdefault(p.family, []).append(p)
  rng = random.Random(f"graft-toy-rl/{seed}")
  for probs in per_family.values():
    rng.shuffle(probs)
  return [p for row in zip(*per_family.values()) for p in row]


def _tokenize_rows(tok, rows, max_len: int):
  prompts = [prompt_text(problem) + given for problem, given, _ in rows]
  targets = [target for _, _, target in rows]
  # A given prefix must not change how the target tokenizes: the sampler sees
  # the whole response as one token stream.
  for (problem, given, target), prompt in zip(rows, prompts):
    if given and (tok.encode(prompt, add_special_tokens=False)
                  + tok.encode(target, add_special_tokens=False)
                  != tok.encode(prompt + target, add_special_tokens=False)):
      raise ValueError(f"tokenizer splits {given!r}|{target[:12]!r} differently joined")
  return tokenize_pairs(tok, prompts, targets, max_len)


def build_model(model_spec: spec_lib.ToyModelSpec, cfg: spec_lib.ToyPairConfig, index: int,
                out_dir: Path) -> dict:
  """Trains one tokenizer + model and writes its HF folder; returns build stats."""
  start = time.perf_counter()
  rows_fn = (group_pools.warm_rows if isinstance(cfg, spec_lib.ToyGroupConfig)
             else pools_lib.warm_rows)
  rows = rows_fn(model_spec, make_pools(cfg), index, cfg.seed)
  if isinstance(cfg, spec_lib.ToyFrictionConfig):
    rows += friction.shortcut_rows(cfg, make_pools(cfg), index)
  tok = train_tokenizer([prompt_text(p) + g + t for p, g, t in rows], model_spec.model_type,
                        model_spec.vocab_size)
  model_cfg = model_spec.model_config(len(tok), tok.eos_token_id, tok.pad_token_id,
                                      max_positions=4 * cfg.max_len)
  data = _tokenize_rows(tok, rows, cfg.max_len)
  model = init_host(model_cfg, seed=cfg.seed * 2 + index)
  tokenized = time.perf_counter()
  model, losses = train_sft(model, data, model_spec.sft, seed=cfg.seed * 2 + index)
  log.info("%s: %d warm-start rows, %d SFT steps, loss %.3f -> %.3f in %.0fs", model_spec.name,
           len(rows), model_spec.sft.steps, losses[0], losses[-1], time.perf_counter() - start)
  save_hf(model, model_cfg, tok, out_dir)
  n_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  return dict(name=model_spec.name, model_type=model_spec.model_type,
              vocab_size=len(tok), params=int(n_params), train_rows=len(rows),
              mean_tokens=float(data.attn_mask_NxT.sum(1).mean()),
              first_loss=losses[0], final_loss=sum(losses[-20:]) / len(losses[-20:]),
              seconds=time.perf_counter() - start,
              train_seconds=time.perf_counter() - tokenized)


def file_hashes(root: Path, names=FOLDERS) -> dict:
  """sha256 of every file of the model folders `names`, by relative path."""
  return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
          for folder in names for f in sorted((root / folder).iterdir()) if f.is_file()}


def read_record(root: str | Path) -> dict | None:
  path = Path(root) / BUILD_FILE
  if not path.is_file():
    return None
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError:
    return None


def load_built(root: str | Path) -> ToyPair:
  """A finished build under `root` as it is, whatever its key (for experiments on other pairs)."""
  root = Path(root)
  record = read_record(root)
  if record is None or not _matches(root, record, record.get("key")):
    raise FileNotFoundError(f"{root}: no finished toy pair build ({BUILD_FILE} and every folder)")
  return ToyPair(root, root / FOLDERS[0], root / FOLDERS[1], record["key"], False, record)


def _matches(root: Path, record: dict | None, key: str) -> bool:
  return (record is not None and record.get("key") == key
          and all((root / f / "model.safetensors").is_file()
                  for f in folders(len(record.get("models") or FOLDERS))))


def _move_into(tmp: Path, root: Path) -> None:
  if root.exists():
    shutil.rmtree(root)
  tmp.rename(root)


def default_folders() -> set[Path]:
  """The default build's model folders (configs/toy.py's), built on first use."""
  return {Path(spec_lib.DEFAULT_ROOT) / f for f in FOLDERS}


def ensure_if_named(paths) -> None:
  """Builds (or reuses) the default toy pair when ``paths`` name its folders and one is
  missing: a run on configs/toy.py needs no build step of its own."""
  wanted = {Path(p) for p in paths if p}
  if wanted & default_folders() and not all(p.exists() for p in wanted):
    ensure_toy_pair(spec_lib.DEFAULT_ROOT)


def ensure_toy_pair(root: str | Path = spec_lib.DEFAULT_ROOT,
                    cfg: spec_lib.ToyPairConfig | None = None, *, force: bool = False,
                    evaluate: bool = True) -> ToyPair:
  """The toy pair under `root`, built first unless a build with the same key is there.

  A shipped build of the config's regime (`shipped_dir`) with the same key is copied
  instead of built.

  With `evaluate`, a fresh build also measures the pass-rate table
  (`graft_jax.toy.skill_table`) and stores it in `root/toy_pair.json`.
  """
  cfg = cfg or spec_lib.default_config()
  root = Path(root)
  key = spec_lib.cache_key(cfg)
  record = read_record(root)
  if not force and _matches(root, record, key):
    return ToyPair(root, root / FOLDERS[0], root / FOLDERS[1], key, False, record)
  prebuilt = shipped_dir(cfg)
  shipped = read_record(prebuilt) if prebuilt else None
  copy = (not force and prebuilt is not None and root.resolve() != prebuilt.resolve()
          and _matches(prebuilt, shipped, key))
  log.info("%s under %s (key %s)",
           "copying the shipped toy pair" if copy else "building the toy pair", root, key)
  start = time.perf_counter()
  root.parent.mkdir(parents=True, exist_ok=True)
  # Built beside the target and moved in at the end: a killed build leaves no
  # half-written folder that could pass for a finished one.
  tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
  tmp.chmod(0o755)  # mkdtemp's 0700 would follow the folder into place
  try:
    if copy:
      for item in (*FOLDERS, BUILD_FILE):
        (shutil.copytree if item in FOLDERS else shutil.copyfile)(prebuilt / item, tmp / item)
      _move_into(tmp, root)
      return ToyPair(root, root / FOLDERS[0], root / FOLDERS[1], key, False, shipped)
    names = folders(len(cfg.models))
    models = [build_model(m, cfg, i, tmp / f) for i, (m, f) in enumerate(zip(cfg.models, names))]
    record = dict(key=key, recipe=spec_lib.RECIPE_VERSION,
                  prompt_suffix=spec_lib.PROMPT_SUFFIX, config=cfg.to_json(),
                  models=models, files=file_hashes(tmp, names),
                  build_machine=host_fingerprint.fingerprint(),
                  build_seconds=time.perf_counter() - start)
    if evaluate:
      from graft_jax.toy.skill_table import pass_rate_table  # pylint: disable=import-outside-toplevel
      eval_start = time.perf_counter()
      record["pass_rates"] = pass_rate_table([tmp / f for f in names], cfg)
      record["eval_seconds"] = time.perf_counter() - eval_start
    record["total_seconds"] = time.perf_counter() - start
    text = json.dumps(record, indent=2)
    record = json.loads(text)  # as a later, cached call will read it
    (tmp / BUILD_FILE).write_text(text)
    _move_into(tmp, root)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return ToyPair(root, root / FOLDERS[0], root / FOLDERS[1], key, True, record)
