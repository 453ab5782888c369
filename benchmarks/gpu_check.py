"""A GPU check, section by section, each in a process of its own that writes its figures
before the next starts: a section that dies, runs out of memory or out of time loses
itself only.

  benchmarks/gpu_check.sh [--out=DIR]                       # on the GPU machine
  .venv/bin/python benchmarks/gpu_check.py --dry --out=DIR  # the same sequence, tiny, on CPU

The driver (this file without ``--section``) runs the sections in order, each as
``gpu_check.py --section=NAME`` under its own timeout (`TIMEOUTS`, summing under 8
minutes), with JAX's share of the device (``--mem_fraction``) and its preallocation
set in the environment before JAX starts. Each writes ``DIR/NAME.json`` as its figures
come (``DIR``: ``--out``, else ``$OUT``); the driver appends one line per section to
``DIR/gpu_check.jsonl``: ok, failed (a figure reported an error), died (its exit code)
or timed out. Shapes are sized from the device's memory (``bytes_limit``, asked once).

The sequence, by what it tells per second (`DEFAULT_SECTIONS`):

- env_decode: the device, JAX and the live-span decode kernel at Qwen3-1.7B's and
  SmolLM3-3B's heads over a 6,144-slot window, a finished row among its rows, against
  XLA (`benchmarks/gpu_check_kernels.py`);
- packed: packed attention forward + backward at 6,144 tokens, whatever kernel
  `attention` picks, against 'dense', then one packed micro-batch of Qwen3-1.7B;
- pool: the slot pool at one device's share, 64 slots, no shrink
  (`benchmarks/gpu_check_pool.py`);
- step: two GRAFT steps of two random-weight models beside the plan of the path the
  engine takes here, no checkpoint written (`benchmarks/gpu_check_step.py`).

By name only: attention, update, scoring, sampler, parity (below: one layer's attention
per implementation, the update programs, `score_rows`, the JAX sampler, a 2-layer slice's
log-probs and gradient), nccl_local (`benchmarks/gpu_check_nccl.py`) and sampler_window.
Timings are the median of ``--reps`` calls after one warm-up call.
"""

from __future__ import annotations

import _path  # noqa: F401  (the repository root on sys.path)

import dataclasses
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import time
import traceback

# A section's process: JAX's share of the device is read when JAX starts, so it is set
# before (the driver sets it for each section; a section run by hand gets the default).
MEM_FRACTION, PREALLOCATE = "0.9", "true"
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", MEM_FRACTION)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", PREALLOCATE)

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from graft_jax.models import attention as attention_lib
from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.plan import costs
from graft_jax.plan import memory as plan_memory

from benchmarks import gpu_check_kernels
from benchmarks import gpu_check_nccl
from benchmarks import gpu_check_pool
from benchmarks import gpu_check_step

_DRY = flags.DEFINE_bool("dry", False, "tiny model and lengths, any backend (a CPU smoke run)")
_LENGTHS = flags.DEFINE_list("lengths", ["4096", "8192"], "row lengths of the update and attention")
_MICRO = flags.DEFINE_integer("micro_batches", 4, "one-row micro-batches per optimizer step")
_REPS = flags.DEFINE_integer("reps", 3, "timed calls after the warm-up")
_PEAK = flags.DEFINE_float("peak_tflops", 989.0, "dense bf16 peak of the device (default: "
                           "DEVICE_RATES by its kind, else H200's)")
_HBM = flags.DEFINE_float("hbm_tbps", 4.8, "HBM bandwidth, TB/s (default: DEVICE_RATES by the "
                          "device's kind, else H200's)")
DEFAULT_SECTIONS = ("env_decode", "packed", "pool", "step")
# Seconds per section, compilation included; the default sequence sums under 8 minutes.
TIMEOUTS = {"env_decode": 60, "packed": 120, "pool": 90, "step": 195}
# (dense bf16 TFLOP/s, HBM TB/s) by device kind, where --peak_tflops / --hbm_tbps are not given.
DEVICE_RATES = {"H100": (989.0, 3.35), "H200": (989.0, 4.8)}
OTHER_TIMEOUT = 120
# --dry: the same sections compiled and run on a CPU (shared, Pallas interpreted).
DRY_TIMEOUT_SCALE = 6
_SECTIONS = flags.DEFINE_list("sections", list(DEFAULT_SECTIONS),
                              "which sections to run, in order (also: attention, update, "
                              "scoring, sampler, parity, nccl_local, sampler_window)")
_SECTION = flags.DEFINE_string("section", "", "run this one section here (the driver's child)")
_OUT = flags.DEFINE_string("out", "", "folder of the sections' JSON (default: $OUT, else "
                           "./gpu_check_out)")
_TIMEOUTS = flags.DEFINE_list("timeouts", [], "NAME=SECONDS overrides of TIMEOUTS")
_MEM_FRACTION = flags.DEFINE_string("mem_fraction", MEM_FRACTION,
                                    "XLA_PYTHON_CLIENT_MEM_FRACTION of each section")

# The --dry model: Qwen3's features (GQA, q/k norm) at toy sizes.
DRY_MODEL = ModelConfig(model_type="qwen3", vocab_size=512, hidden_size=64, intermediate_size=128,
                        num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True,
                        tie_word_embeddings=True)
DRY_LENGTHS = (128, 256)


def model_config() -> ModelConfig:
  return DRY_MODEL if _DRY.value else ModelConfig.qwen3_1p7b()


def lengths() -> list[int]:
  return list(DRY_LENGTHS) if _DRY.value else [int(x) for x in _LENGTHS.value]


def median_seconds(fn, reps: int) -> float:
  """Median wall seconds of ``fn()`` (which blocks on its result) after one warm-up."""
  fn()
  times = []
  for _ in range(max(reps, 1)):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def peak_bytes() -> int | None:
  """The device's peak bytes in use so far in this process (None where not reported)."""
  stats = jax.devices()[0].memory_stats() or {}
  return stats.get("peak_bytes_in_use")


def program_bytes(compiled) -> dict:
  """XLA's memory analysis of a compiled program: arguments, outputs, scratch, and the
  total it needs at once (`graft_jax.plan.memory.program_bytes`)."""
  m = compiled.memory_analysis()
  if m is None:
    return {}
  return {"arguments": int(m.argument_size_in_bytes), "outputs": int(m.output_size_in_bytes),
          "temp": int(m.temp_size_in_bytes), "total": plan_memory.program_bytes(compiled)}


def gib(x) -> str:
  return "n/a" if x is None else f"{x / 2**30:.2f} GiB"


def attention_section(out: dict) -> None:
  """Forward + backward of one layer's attention at the model's head shapes."""
  cfg = model_config()
  k, g, h = cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim
  impls = ["dense", "blocked"] + (["cudnn"] if jax.default_backend() == "gpu" else [])
  if "cudnn" not in impls:
    print(f"attention: cudnn skipped (backend {jax.default_backend()})")
  for t in lengths():
    rng = np.random.default_rng(t)
    draw = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.bfloat16)
    q, kk, v, ct = draw(1, t, k, g, h), draw(1, t, k, h), draw(1, t, k, h), draw(1, t, k, g, h)
    mask = jnp.asarray(np.arange(t)[None] < t - t // 16)  # a right-padded row
    want = None
    for impl in impls:
      key = f"attention/{impl}/{t}"
      try:
        fwd = jax.jit(lambda q, kk, v, impl=impl: attention_lib.attention(q, kk, v, mask,
                                                                          impl=impl))
        loss = lambda q, kk, v, impl=impl: (attention_lib.attention(q, kk, v, mask, impl=impl)
                                            .astype(jnp.float32) * ct).sum()
        step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
        compiled = step.lower(q, kk, v).compile()
        seconds = median_seconds(lambda: jax.block_until_ready(compiled(q, kk, v)), _REPS.value)
        got = np.asarray(fwd(q, kk, v).astype(jnp.float32))[np.asarray(mask)]
        want = got if want is None else want
        diff = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-9))
        mem = program_bytes(compiled)
        out[key] = {"seconds": seconds, "max_rel_diff_vs_dense": diff, **mem}
        print(f"attention {impl:8s} T={t}: fwd+bwd {1e3 * seconds:8.2f} ms, scratch "
              f"{gib(mem.get('temp'))}, max |out - dense| / max |dense| {diff:.2e}")
      except Exception as e:  # pylint: disable=broad-except
        out[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        print(f"attention {impl:8s} T={t}: failed: {out[key]['error']}")


def bf16_model(cfg: ModelConfig, **memory):
  model = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.float32, dtype=jnp.bfloat16)
  model.set_memory_options(**memory)
  return model


def update_section(out: dict) -> None:
  """The library's update programs on micro-batches of one row of T tokens, with
  attention 'auto'; if that fails, again with 'blocked'."""
  update_with(out, "auto")
  if any("error" in v for k, v in out.items() if k.startswith("update/")):
    update_with(out, "blocked", suffix="/blocked")


def update_with(out: dict, attention: str, suffix: str = "") -> None:
  from graft_jax.config.run_config import OptimizerConfig  # pylint: disable=import-outside-toplevel
  from graft_jax.train.methods.base import ClippedTokenLoss  # pylint: disable=import-outside-toplevel
  from graft_jax.train.update import make_optimizer, update_program  # pylint: disable=import-outside-toplevel

  cfg, m = model_config(), _MICRO.value
  model = bf16_model(cfg, remat="full", scan_layers=True, attention=attention)
  graphdef, params = nnx.split(model)
  tx, loss = make_optimizer(OptimizerConfig(lr=1e-6)), ClippedTokenLoss()
  opt_state = jax.jit(tx.init)(params)
  print(f"update: {cfg.model_type} with {costs.all_params(cfg) / 1e9:.2f} B parameters, "
        f"attention {attention_lib.describe_impl(attention, dtype=jnp.bfloat16, head_dim=cfg.head_dim, length=max(lengths()))}")
  for t in lengths():
    key = f"update/{t}{suffix}"
    try:
      (grads_fn, grad_args), (apply_fn, apply_args) = update_program(
          graphdef, params, tx, loss, rows=1, length=t, slots=m)
      rng = np.random.default_rng(t)
      specs = {f.name: getattr(grad_args[2][0], f.name) for f in dataclasses.fields(loss.Batch)}
      batch = loss.Batch(**{name: _fill(name, spec.shape, rng, cfg.vocab_size).astype(spec.dtype)
                            for name, spec in specs.items()})
      scalars = {"share": np.full(m, 1 / m, np.float32),
                 **{k: np.full(m, v, np.float32) for k, v in loss.totals(_flat(batch)).items()}}
      grad_c = grads_fn.lower(*grad_args).compile()
      apply_c = apply_fn.lower(*apply_args).compile()
      predicted = max(program_bytes(grad_c).get("total", 0), program_bytes(apply_c).get("total", 0))
      # The optimizer state and the fp32 accumulator live beside the gradient program.
      state_bytes = sum(x.nbytes for x in jax.tree.leaves(opt_state))
      predicted += state_bytes
      state = {"params": params, "opt": opt_state}
      zeros = jax.jit(lambda p: jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), p))

      def step():
        acc, metrics = grad_c(state["params"], zeros(state["params"]),
                              (batch, np.zeros((m, 1), np.float32)), scalars,
                              np.int32(m), np.int32(0))
        state["params"], state["opt"], norm = apply_c(state["params"], state["opt"], acc)
        jax.block_until_ready((state["params"], norm, metrics))

      seconds = median_seconds(step, _REPS.value)
      params, opt_state = state["params"], state["opt"]
      tokens_s = m * t / seconds
      mfu = tokens_s * costs.train_flops_per_token(cfg, t) / (_PEAK.value * 1e12)
      peak = peak_bytes()
      out[key] = {"seconds": seconds, "tokens_per_s": tokens_s, "mfu": mfu, "peak_bytes": peak,
                  "predicted_bytes": predicted}
      print(f"update T={t} x {m} micro-batches: {seconds:.3f} s/step, {tokens_s:,.0f} tokens/s, "
            f"MFU {100 * mfu:.1f}%, device peak {gib(peak)} (programs' analysis + optimizer "
            f"state {gib(predicted)})")
    except Exception as e:  # pylint: disable=broad-except
      out[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
      print(f"update T={t}: failed: {out[key]['error']}")
      traceback.print_exc(file=sys.stderr)


def _fill(name: str, shape, rng, vocab: int) -> np.ndarray:
  """A micro-batch field: random ids, full rows, and losses that all count."""
  if name == "ids":
    return rng.integers(0, vocab, shape)
  if name in ("attn", "resp_mask", "ppo", "weight", "is_self", "cap_ratio"):
    return np.ones(shape)
  if name == "old_logp":
    return np.full(shape, -2.0)
  if name == "adv":
    return rng.normal(size=shape)
  return np.zeros(shape)


def _flat(batch):
  """The stacked micro-batches as one batch (for the minibatch totals)."""
  return jax.tree.map(lambda x: np.asarray(x).reshape((-1,) + np.asarray(x).shape[2:]), batch)


def scoring_section(out: dict) -> None:
  """`score_rows` over 16 rows at the longest length, under the update's token budget."""
  from graft_jax.train.row_logprobs import score_rows  # pylint: disable=import-outside-toplevel

  cfg, t = model_config(), max(lengths())
  model = bf16_model(cfg, scan_layers=True, attention="auto", score_tokens=4 * t)
  rng = np.random.default_rng(1)
  rows = 16
  prompts = [rng.integers(0, cfg.vocab_size, t // 4).tolist() for _ in range(rows)]
  responses = [rng.integers(0, cfg.vocab_size, t - t // 4 - 1).tolist() for _ in range(rows)]
  try:
    seconds = median_seconds(lambda: score_rows(model, prompts, responses, 0, length_cap=t),
                             _REPS.value)
    tokens_s = rows * (t - 1) / seconds
    mfu = tokens_s * costs.score_flops_per_token(cfg, t) / (_PEAK.value * 1e12)
    out["scoring"] = {"seconds": seconds, "tokens_per_s": tokens_s, "mfu": mfu, "rows": rows,
                      "length": t}
    print(f"scoring {rows} rows of {t} tokens: {seconds:.3f} s, {tokens_s:,.0f} tokens/s, "
          f"MFU {100 * mfu:.1f}%")
  except Exception as e:  # pylint: disable=broad-except
    out["scoring"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    print(f"scoring: failed: {out['scoring']['error']}")


def sampler_section(out: dict) -> None:
  """The JAX sampler from bf16 weights: prompts x n rows, every row to the token limit."""
  from graft_jax.rollout import JaxSamplerEngine, SamplingParams  # pylint: disable=import-outside-toplevel

  cfg = model_config()
  prompts_n, n, prompt_len, new = (4, 2, 16, 32) if _DRY.value else (32, 8, 512, 1024)
  model = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
  model.set_memory_options(scan_layers=False, attention="auto")
  rng = np.random.default_rng(2)
  prompts = [rng.integers(3, cfg.vocab_size, prompt_len).tolist() for _ in range(prompts_n)]
  # An EOS id the random model samples about once in a vocabulary's worth of tokens:
  # rows run (almost) to the limit, the worst case.
  engine = JaxSamplerEngine(model, eos_ids=cfg.vocab_size - 1, pad_id=0)
  params = SamplingParams(max_new_tokens=new, temperature=1.0, seed=0)
  try:
    result = {}

    def call():
      result["r"] = engine.generate(prompts, n, params)

    seconds = median_seconds(call, _REPS.value)
    rows = prompts_n * n
    tokens = sum(len(result["r"].response_ids(b)) for b in range(rows))
    tokens_s = tokens / seconds
    ceiling = costs.decode_tokens_per_s_ceiling(cfg, rows, prompt_len + new // 2,
                                                _HBM.value * 1e12)
    out["sampler"] = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens_s,
                      "hbm_ceiling_tokens_per_s": ceiling, "rows": rows, "prompt_len": prompt_len,
                      "max_new_tokens": new, "decode_attention": engine.decode_attention}
    print(f"sampler {rows} rows ({prompts_n} prompts x {n}), prompt {prompt_len}, up to {new} "
          f"new: {seconds:.2f} s, {tokens_s:,.0f} tokens/s, {100 * tokens_s / ceiling:.0f}% of "
          f"the HBM-bound {ceiling:,.0f} tokens/s")
  except Exception as e:  # pylint: disable=broad-except
    out["sampler"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    print(f"sampler: failed: {out['sampler']['error']}")
    traceback.print_exc(file=sys.stderr)


def parity_section(out: dict) -> None:
  """Log-probs and their gradient through a 2-layer slice of the model (bf16 compute)
  under each attention implementation against 'dense', on left-padded rows."""
  from graft_jax.models import token_logprobs  # pylint: disable=import-outside-toplevel

  cfg = dataclasses.replace(model_config(), num_layers=2, use_rope_layers=(1, 1))
  t = min(lengths())
  rng = np.random.default_rng(3)
  ids = jnp.asarray(rng.integers(0, cfg.vocab_size, (2, t)), jnp.int32)
  mask = jnp.asarray(np.arange(t)[None] >= np.array([[0], [t // 3]]))  # a left-padded row

  def logp_and_grad(impl):
    model = bf16_model(cfg, attention=impl)
    graphdef, params = nnx.split(model)
    loss = lambda p: -(token_logprobs(nnx.merge(graphdef, p), ids, mask) * mask).sum()
    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    logp = jax.jit(lambda p: token_logprobs(nnx.merge(graphdef, p), ids, mask))(params)
    flat = np.concatenate([np.asarray(g, np.float32).ravel() for g in jax.tree.leaves(grads)])
    return np.asarray(logp)[np.asarray(mask)], flat, float(value)

  want_logp, want_grad, _ = logp_and_grad("dense")
  impls = ["blocked"] + (["cudnn"] if jax.default_backend() == "gpu" else [])
  for impl in impls:
    try:
      logp, grad, _ = logp_and_grad(impl)
      d_logp = float(np.abs(logp - want_logp).max())
      d_grad = float(np.linalg.norm(grad - want_grad) / np.linalg.norm(want_grad))
      out[f"parity/{impl}"] = {"max_abs_logp_diff": d_logp, "rel_grad_diff": d_grad, "length": t}
      print(f"parity {impl:8s} vs dense, 2 layers, T={t}: max |logp diff| {d_logp:.3e}, "
            f"|grad diff| / |grad| {d_grad:.3e}")
    except Exception as e:  # pylint: disable=broad-except
      out[f"parity/{impl}"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
      print(f"parity {impl}: failed: {out[f'parity/{impl}']['error']}")


class Report(dict):
  """A section's figures, rewritten to its JSON file at every figure: a section cut short
  keeps what it measured."""

  def __init__(self, path: pathlib.Path, **items):
    super().__init__(**items)
    self.path = path
    self.save()

  def __setitem__(self, key, value):
    super().__setitem__(key, value)
    self.save()

  def save(self) -> None:
    tmp = self.path.with_suffix(".tmp")
    tmp.write_text(json.dumps(self, indent=1, default=str))
    tmp.replace(self.path)


def out_dir() -> pathlib.Path:
  path = pathlib.Path(_OUT.value or os.environ.get("OUT") or "gpu_check_out")
  path.mkdir(parents=True, exist_ok=True)
  return path


def device_bytes() -> int | None:
  """JAX's pool on the device (``bytes_limit``: the share of ``--mem_fraction``), asked once
  per section after the environment is set; None where not reported (a CPU)."""
  return (jax.devices()[0].memory_stats() or {}).get("bytes_limit")


def section_main(name: str) -> int:
  """One section in this process: its figures to ``DIR/NAME.json``; 1 if one failed."""
  device = jax.devices()[0]
  rates = next((r for kind, r in DEVICE_RATES.items() if kind in device.device_kind), None)
  for flag, value in zip(("peak_tflops", "hbm_tbps"), rates or ()):
    if not flags.FLAGS[flag].present:
      setattr(flags.FLAGS, flag, value)
  out = Report(out_dir() / f"{name}.json", section=name, device=device.device_kind,
               backend=jax.default_backend(), jax=jax.__version__, dry=_DRY.value,
               bytes_limit=device_bytes(), peak_tflops=_PEAK.value, hbm_tbps=_HBM.value,
               mem_fraction=os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION"))
  print(f"[{name}] {device.device_kind} ({jax.default_backend()}), JAX {jax.__version__}, "
        f"pool {gib(out['bytes_limit'])}{', dry run' if _DRY.value else ''}", flush=True)
  try:
    SECTIONS[name](out)
  except Exception as e:  # pylint: disable=broad-except
    out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    print(f"[{name}] failed: {out[name]['error']}", flush=True)
    traceback.print_exc(file=sys.stderr)
  out.save()  # figures changed in place
  failed = [k for k, v in out.items() if isinstance(v, dict) and "error" in v]
  return 1 if failed else 0


def timeouts() -> dict:
  """Seconds per section: `TIMEOUTS` (x `DRY_TIMEOUT_SCALE` with --dry), then --timeouts."""
  got = {k: v * (DRY_TIMEOUT_SCALE if _DRY.value else 1) for k, v in TIMEOUTS.items()}
  for item in _TIMEOUTS.value:
    name, _, seconds = item.partition("=")
    got[name] = float(seconds)
  return got


def run_section(name: str, folder: pathlib.Path, limit: float) -> dict:
  """``name`` in a process of its own, killed (its whole process group) past ``limit``
  seconds; its line of ``gpu_check.jsonl``."""
  env = dict(os.environ, XLA_PYTHON_CLIENT_MEM_FRACTION=_MEM_FRACTION.value,
             XLA_PYTHON_CLIENT_PREALLOCATE=PREALLOCATE, PYTHONUNBUFFERED="1")
  args = [a for a in sys.argv[1:] if not a.startswith(("--sections", "--out", "--section="))]
  cmd = [sys.executable, __file__, f"--section={name}", f"--out={folder}", *args]
  t0 = time.perf_counter()
  proc = subprocess.Popen(cmd, env=env, start_new_session=True)
  try:
    rc = proc.wait(timeout=limit)
    status = {0: "ok", 1: "failed"}.get(rc, f"died (exit {rc})")
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    rc, status = proc.wait(), f"timed out after {limit:.0f} s"
  return {"section": name, "status": status, "rc": rc, "wall_s": time.perf_counter() - t0,
          "timeout_s": limit, "json": str(folder / f"{name}.json")}


def driver_main() -> int:
  """Every section of ``--sections`` in order, each in its own process (`run_section`)."""
  folder, limits = out_dir(), timeouts()
  print(f"gpu_check: sections {', '.join(_SECTIONS.value)} into {folder}", flush=True)
  worst = 0
  for name in _SECTIONS.value:
    default = OTHER_TIMEOUT * (DRY_TIMEOUT_SCALE if _DRY.value else 1)
    line = run_section(name, folder, limits.get(name, default))
    with open(folder / "gpu_check.jsonl", "a") as f:
      f.write(json.dumps(line) + "\n")
    print(f"gpu_check: {name} {line['status']} ({line['wall_s']:.0f} s of {line['timeout_s']:.0f})",
          flush=True)
    worst = max(worst, 0 if line["status"] == "ok" else 1)
  return worst


SECTIONS = {"attention": attention_section, "update": update_section,
            "scoring": scoring_section, "sampler": sampler_section, "parity": parity_section}
SECTIONS["nccl_local"] = lambda out: gpu_check_nccl.nccl_local_section(
    out, dry=_DRY.value, dry_model=DRY_MODEL)
SECTIONS["env_decode"] = lambda out: gpu_check_kernels.env_decode_section(
    out, dry=_DRY.value, reps=_REPS.value)
SECTIONS["packed"] = lambda out: gpu_check_kernels.packed_section(
    out, dry=_DRY.value, reps=_REPS.value, peak_tflops=_PEAK.value, dry_model=DRY_MODEL)
SECTIONS["pool"] = lambda out: gpu_check_pool.pool_section(
    out, dry=_DRY.value, hbm_tbps=_HBM.value, device_bytes=out["bytes_limit"],
    dry_model=DRY_MODEL)
SECTIONS["step"] = lambda out: gpu_check_step.step_section(  # benchmarks/gpu_check_step.py
    out, dry=_DRY.value, peak_tflops=_PEAK.value, hbm_tbps=_HBM.value,
    mem_fraction=float(os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"]))
SECTIONS["sampler_window"] = lambda out: gpu_check_step.sampler_window_section(
    out, dry=_DRY.value, device_bytes=out["bytes_limit"])


def main(_):
  names = [_SECTION.value] if _SECTION.value else _SECTIONS.value
  unknown = [s for s in names if s not in SECTIONS]
  if unknown:
    print(f"gpu_check: unknown section(s) {unknown}; choose from {sorted(SECTIONS)}")
    return 2
  return section_main(_SECTION.value) if _SECTION.value else driver_main()


if __name__ == "__main__":
  app.run(main)
