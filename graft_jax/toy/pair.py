"""Build (or reuse) the toy heterogeneous pair as two Hugging Face model folders.

`ensure_toy_pair()` returns the folders of `runs/toy_pair/{model_a,model_b}`,
building them first when absent or made from other settings (the cache key is
`spec.cache_key`). A build is deterministic for a given config and seed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import jax
from flax import nnx

from graft_jax.data.problem import Problem
from graft_jax.data.synthetic import make_synthetic
from graft_jax.models import save_hf
from graft_jax.toy import spec as spec_lib
from graft_jax.toy.tokenizer import train_tokenizer
from graft_jax.toy.warm_start import init_host, tokenize_pairs, train_sft

log = logging.getLogger(__name__)
BUILD_FILE = "toy_pair.json"  # in the root: key, settings, timings, pass rates
FOLDERS = ("model_a", "model_b")


@dataclasses.dataclass(frozen=True)
class ToyPair:
  """The built pair: HF folder paths and what the build recorded."""

  root: Path
  model_a: Path
  model_b: Path
  key: str
  built: bool  # False when the cached folders were reused
  record: dict


def prompt_text(problem: str) -> str:
  return problem + spec_lib.PROMPT_SUFFIX


def response_text(solution: str) -> str:
  return " " + solution


def eval_problems(cfg: spec_lib.ToyPairConfig) -> list[Problem]:
  """Held-out problems of every evaluated family (never trained on)."""
  return make_synthetic(cfg.eval_families, cfg.eval_per_family,
                        seed=cfg.seed + 10_000, difficulty=cfg.difficulty)


def training_problems(model: spec_lib.ToyModelSpec, cfg: spec_lib.ToyPairConfig,
                      index: int, exclude: set[str]) -> list[Problem]:
  out = []
  for family, n, difficulty in model.mixture:
    out += make_synthetic(family, n, seed=cfg.seed + 1 + index, difficulty=difficulty,
                          exclude=exclude)
  return out


def build_model(model_spec: spec_lib.ToyModelSpec, cfg: spec_lib.ToyPairConfig, index: int,
                exclude: set[str], out_dir: Path) -> dict:
  """Trains one tokenizer + model and writes its HF folder; returns build stats."""
  start = time.perf_counter()
  problems = training_problems(model_spec, cfg, index, exclude)
  prompts = [prompt_text(p.problem) for p in problems]
  responses = [response_text(p.solution) for p in problems]
  tok = train_tokenizer([p + r for p, r in zip(prompts, responses)], model_spec.model_type,
                        model_spec.vocab_size)
  model_cfg = model_spec.model_config(len(tok), tok.eos_token_id, tok.pad_token_id,
                                      max_positions=4 * cfg.max_len)
  data = tokenize_pairs(tok, prompts, responses, cfg.max_len)
  model = init_host(model_cfg, seed=cfg.seed * 2 + index)
  tokenized = time.perf_counter()
  model, losses = train_sft(model, data, model_spec.sft, seed=cfg.seed * 2 + index)
  save_hf(model, model_cfg, tok, out_dir)
  n_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  return dict(name=model_spec.name, model_type=model_spec.model_type,
              vocab_size=len(tok), params=int(n_params), train_rows=len(problems),
              mean_tokens=float(data.attn_mask_NxT.sum(1).mean()),
              first_loss=losses[0], final_loss=sum(losses[-20:]) / len(losses[-20:]),
              seconds=time.perf_counter() - start,
              train_seconds=time.perf_counter() - tokenized)


def read_record(root: str | Path) -> dict | None:
  path = Path(root) / BUILD_FILE
  if not path.is_file():
    return None
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError:
    return None


def ensure_toy_pair(root: str | Path = spec_lib.DEFAULT_ROOT,
                    cfg: spec_lib.ToyPairConfig | None = None, *, force: bool = False,
                    evaluate: bool = True) -> ToyPair:
  """The toy pair under `root`, built first unless a build with the same key is there.

  With `evaluate`, a fresh build also measures the pass-rate table
  (`graft_jax.toy.evaluate`) and stores it in `root/toy_pair.json`.
  """
  cfg = cfg or spec_lib.default_config()
  root = Path(root)
  key = spec_lib.cache_key(cfg)
  record = read_record(root)
  if (not force and record is not None and record.get("key") == key
      and all((root / f / "model.safetensors").is_file() for f in FOLDERS)):
    return ToyPair(root, root / FOLDERS[0], root / FOLDERS[1], key, False, record)
  log.info("building the toy pair under %s (key %s)", root, key)
  start = time.perf_counter()
  root.parent.mkdir(parents=True, exist_ok=True)
  # Built beside the target and moved in at the end: a killed build leaves no
  # half-written folder that could pass for a finished one.
  tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
  tmp.chmod(0o755)  # mkdtemp's 0700 would follow the folder into place
  try:
    exclude = {p.problem for p in eval_problems(cfg)}
    models = [build_model(m, cfg, i, exclude, tmp / f)
              for i, (m, f) in enumerate(zip((cfg.model_a, cfg.model_b), FOLDERS))]
    record = dict(key=key, recipe=spec_lib.RECIPE_VERSION,
                  prompt_suffix=spec_lib.PROMPT_SUFFIX, config=cfg.to_json(),
                  models=models, build_seconds=time.perf_counter() - start)
    if evaluate:
      from graft_jax.toy.evaluate import pass_rate_table  # pylint: disable=import-outside-toplevel
      eval_start = time.perf_counter()
      record["pass_rates"] = pass_rate_table([tmp / f for f in FOLDERS], cfg)
      record["eval_seconds"] = time.perf_counter() - eval_start
    record["total_seconds"] = time.perf_counter() - start
    text = json.dumps(record, indent=2)
    record = json.loads(text)  # as a later, cached call will read it
    (tmp / BUILD_FILE).write_text(text)
    if root.exists():
      shutil.rmtree(root)
    tmp.rename(root)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return ToyPair(root, root / FOLDERS[0], root / FOLDERS[1], key, True, record)
